"""kube-scheduler's HTTP client for extenders, as the live scheduler's ExtenderTransport.

``pkg/scheduler/extender.go`` (``HTTPExtender.send``): ``POST`` the JSON body with
``Content-Type: application/json``, no credentials, the extender's ``httpTimeout`` as the
client timeout; any status other than 200 fails the call (``failed to <verb> with extender at
URL <url>, code <status>``), as does a transport error. The answer body goes back to the
scheduler model, which parses it as kube-scheduler does
(:mod:`sits_observe.lab.scheduler.wire`).

Calls count in ``sits_scheduler_extender_calls_total{verb, result}`` (result ``ok`` or
``error``), the scheduler's view of the extender (the service counts its own side in
``sits_extender_calls_total``).
"""

from __future__ import annotations

import httpx
from prometheus_client import CollectorRegistry, Counter

from sits_observe.lab.scheduler.wire import ExtenderCallError


class HttpExtenderTransport:
    """Extender calls over HTTP with one pooled ``httpx`` client."""

    def __init__(
        self, client: httpx.Client | None = None, *, registry: CollectorRegistry | None = None
    ) -> None:
        self.client = client or httpx.Client()
        self.calls = Counter(
            "sits_scheduler_extender_calls_total",
            "extender calls the live scheduler made, by verb and result: ok, error",
            ("verb", "result"),
            registry=registry or CollectorRegistry(),
        )

    def post(self, url: str, body: bytes, timeout_s: float) -> bytes:
        """POST ``body`` to ``url``; the answer, or :class:`ExtenderCallError`."""
        verb = url.rstrip("/").rsplit("/", 1)[-1]
        try:
            response = self.client.post(
                url,
                content=body,
                headers={"Content-Type": "application/json"},
                timeout=timeout_s,
            )
        except httpx.HTTPError as exc:
            self.calls.labels(verb, "error").inc()
            raise ExtenderCallError(f'Post "{url}": {exc}') from exc
        if response.status_code != 200:
            self.calls.labels(verb, "error").inc()
            raise ExtenderCallError(
                f"failed to {verb} with extender at URL {url}, code {response.status_code}"
            )
        self.calls.labels(verb, "ok").inc()
        return response.content

    def close(self) -> None:
        """Close the pooled connections."""
        self.client.close()
