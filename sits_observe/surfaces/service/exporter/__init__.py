"""The derived signals on ``/metrics``: passes that render reports into metric families, their
cache, labels and settings."""
