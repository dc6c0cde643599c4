"""Trace replays under placement policies (the ATC'23 evaluation's and ours), through the
extender's request handling for the kube-* policies, and the ``whatif`` report built on them."""
