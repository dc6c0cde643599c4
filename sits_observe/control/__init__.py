"""control layer (see docs/architecture.md)."""
