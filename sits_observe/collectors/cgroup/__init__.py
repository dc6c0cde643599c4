"""The kubelet's cgroup v2 tree: the container collector, its file parsers and path grammar, and
the NUMA collector (sysfs and cgroup NUMA files)."""
