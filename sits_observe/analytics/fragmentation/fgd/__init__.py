"""Cluster GPU fragmentation as Weng et al. measure it (FGD, USENIX ATC 2023), pure and
vectorised: the value types, the cluster state, the target workload M, the measure F(M) and the
incremental index the extender and the replay score placements with.

No store: an import-linter contract forbids DuckDB here. The live cluster is read from the store
by :mod:`sits_observe.analytics.fragmentation.fgd_live`, beside this package.
"""
