"""analytics layer (see docs/architecture.md)."""
