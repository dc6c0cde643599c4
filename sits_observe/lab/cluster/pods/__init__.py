"""The simulated cluster's pods: what each one is (:mod:`.specs`), the workloads' seeded mix
that creates them (:mod:`.generator`) and the two tenants with GPU quotas of their own
(:mod:`.tenants`)."""
