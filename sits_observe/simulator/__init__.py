"""simulator layer (see docs/architecture.md)."""
