"""The controller's decision rules, each turning signals into proposals: levels and labels,
quotas (QoS tiers and namespaces), queues (Kueue, KAI) and tenant isolation."""
