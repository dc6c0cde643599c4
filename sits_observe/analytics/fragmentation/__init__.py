"""GPU fragmentation: the documents' SMF rate per container and GPU, the FGD cluster measure
(Weng et al., ATC'23), live and in the replay, MIG profiles, and idle or stranded GPUs."""
