"""The replay itself, pure: a trace replayed onto a cluster state under placement policies (the
ATC'23 evaluation's, ours and kube-scheduler's model), with the results per seed and policy.

No store: an import-linter contract forbids DuckDB here. What reads the store or a
configuration file (the in-process extender policies, the ``whatif`` report and its trace, the
``simulate`` command's settings) lives beside this package in :mod:`sits_observe.lab.replay`.
"""
