"""The dcgm-exporter collector: scrape ``/metrics`` over bounded HTTP and parse it with
:class:`~.dcgm.DcgmParser` (one parser a collector, so label sets seen before are reused)."""

from __future__ import annotations

from datetime import datetime

import httpx

from sits_observe.collectors.dcgm import DcgmParser, RejectedLine
from sits_observe.collectors.http import DEFAULT_MAX_BYTES, new_client, read_source
from sits_observe.domain.collect import CollectResult


class DcgmCollector:
    """Scrapes a dcgm-exporter endpoint (``http(s)://host:9400/metrics``) or reads a saved body.

    A client passed in is borrowed (its timeout applies; the caller closes it); without one
    the collector opens its own on first use and :meth:`close` closes it. An unreachable,
    slow, failing or oversized source raises :class:`~sits_observe.errors.CollectorError`.
    """

    name = "dcgm"

    def __init__(
        self,
        source: str,
        *,
        node: str | None = None,
        client: httpx.Client | None = None,
        max_bytes: int = DEFAULT_MAX_BYTES,
    ) -> None:
        self.source = source
        self.node = node
        self.max_bytes = max_bytes
        self._client = client
        self._own_client = client is None
        self._parser = DcgmParser()

    def collect(self, now: datetime) -> CollectResult:
        """Read the source once and pivot it; ``now`` stamps samples without a timestamp."""
        if self._client is None and self.source.startswith(("http://", "https://")):
            self._client = new_client()
        text = read_source(self.source, self._client, max_bytes=self.max_bytes)
        return self._parser.parse(text, now=now, node=self.node)

    @property
    def first_rejected(self) -> RejectedLine | None:
        """The first line of the last body read that was dropped whole (None: none was)."""
        return self._parser.first_rejected

    def close(self) -> None:
        """Close the HTTP client when this collector opened it."""
        if self._own_client and self._client is not None:
            self._client.close()
            self._client = None

    def __enter__(self) -> DcgmCollector:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
