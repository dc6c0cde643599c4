"""The experiment: the same seeded workload under each arm (kube-scheduler alone, with the
extender, with one module off), on the production path, measured and summarised."""
