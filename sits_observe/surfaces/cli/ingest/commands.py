"""CLI: ``sits-observe ingest ...``, one module per source."""

from __future__ import annotations

import typer

from sits_observe.surfaces.cli.ingest import cgroup as ingest_cgroup
from sits_observe.surfaces.cli.ingest import dcgm as ingest_dcgm
from sits_observe.surfaces.cli.ingest import k8s as ingest_k8s
from sits_observe.surfaces.cli.ingest import requests as ingest_requests


def register(app: typer.Typer) -> None:
    """Add every ``ingest`` sub-command to ``app`` (the ``ingest`` group)."""
    ingest_dcgm.register(app)
    ingest_cgroup.register(app)
    ingest_requests.register(app)
    ingest_k8s.register(app)
