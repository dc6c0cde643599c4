"""The service app under a real uvicorn on loopback, and a strict JSON reader.

:class:`ServedApp` serves ``create_app(settings, store)`` on 127.0.0.1 (port chosen by the
OS) in a thread; :func:`strict_json` reads an answer the way strict clients (Go, browsers'
``JSON.parse``) do, refusing ``NaN`` and ``Infinity``.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

import uvicorn

from sits_observe.store import Store
from sits_observe.surfaces.service.app import create_app, utc_now
from sits_observe.surfaces.service.settings import ServiceSettings


class ServedApp:
    """The service app under uvicorn on 127.0.0.1 (port chosen by the OS), in a thread."""

    def __init__(
        self,
        store: Store,
        settings: ServiceSettings,
        *,
        clock: Callable[[], datetime] | None = None,
    ) -> None:
        self.app = create_app(settings, store, clock=clock or utc_now)
        config = uvicorn.Config(
            self.app, host="127.0.0.1", port=0, log_level="warning", lifespan="on"
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.url = ""

    def __enter__(self) -> ServedApp:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise AssertionError("uvicorn did not start")
            time.sleep(0.01)
        port = self.server.servers[0].sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)

    def metric(self, name: str, **labels: str) -> float:
        return self.app.state.metrics.registry.get_sample_value(name, labels) or 0.0


def strict_json(text: str) -> Any:
    """``json.loads`` refusing the non-standard constants ``NaN``, ``Infinity``, ``-Infinity``."""

    def refuse(constant: str) -> Any:
        raise ValueError(f"{constant} is not JSON (RFC 8259); a strict client refuses it")

    return json.loads(text, parse_constant=refuse)
