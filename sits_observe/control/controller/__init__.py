"""The closed-loop controller: signals and the cluster's state in, a pure ``plan()``, a safe and
recorded ``apply()`` through the Kubernetes API, under a leader lease; dry-run by default."""
