"""The service app served by uvicorn in a thread on a loopback port: the embedded demo's and
the experiment's service (``serve`` itself runs :mod:`.server` in the main thread).

The socket comes from :func:`.sockets.bind`, so connections have Nagle's algorithm off as
``serve``'s do.
"""

from __future__ import annotations

import threading
import time

import uvicorn
from starlette.applications import Starlette

from sits_observe.surfaces.service.http.sockets import bind


class LoopbackService:
    """``app`` (the service's, or an extender port's) on 127.0.0.1, a free port, in a daemon
    thread."""

    def __init__(self, app: Starlette, *, name: str = "the embedded service") -> None:
        self.app = app
        self.name = name
        self.sock = bind("127.0.0.1", 0, name)
        config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self.sock]}, name="service", daemon=True
        )

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>``."""
        host, port = self.sock.getsockname()[:2]
        return f"http://{host}:{port}"

    def start(self, timeout_s: float = 15.0) -> LoopbackService:
        """Start serving; RuntimeError when the server is not up within ``timeout_s``."""
        self.thread.start()
        deadline = time.monotonic() + timeout_s  # wall time: the server really starts
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"{self.name} did not start")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        """Ask the server to exit, wait for it, close the socket."""
        self.server.should_exit = True
        if self.thread.is_alive():
            self.thread.join(timeout=15)
        self.sock.close()
