"""CLI: ``sits-observe ingest ...``, one module per source."""

from __future__ import annotations

import typer

from sits_observe.surfaces.cli import ingest_cgroup, ingest_dcgm, ingest_k8s, ingest_requests


def register(app: typer.Typer) -> None:
    """Add every ``ingest`` sub-command to ``app`` (the ``ingest`` group)."""
    ingest_dcgm.register(app)
    ingest_cgroup.register(app)
    ingest_requests.register(app)
    ingest_k8s.register(app)
