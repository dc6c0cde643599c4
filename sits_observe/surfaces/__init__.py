"""surfaces layer (see docs/architecture.md)."""
