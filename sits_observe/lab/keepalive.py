"""One kept HTTP/1.1 connection of a lab client, sent again once when it went stale.

The lab's clients that talk to servers many times a second (the simulated kubelets and
workload controllers to the Kubernetes emulator, :mod:`sits_observe.lab.kube.raw`; the
kube-scheduler model to the extender, :mod:`sits_observe.lab.scheduler.http`) keep one
connection per server with the standard library's client. A request the server could not have
read because it closed the idle connection first is sent again on a new one, as Go's transport
(kube-scheduler's) and urllib3 (the official Python client's) do; any other failure closes
the connection and is raised.
"""

from __future__ import annotations

import http.client
import ssl
from collections.abc import Mapping
from typing import cast

#: A kept connection the server closed while it was idle.
STALE = (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError)

#: An answer: status, reason, headers, body.
Answer = tuple[int, str, Mapping[str, str], bytes]


class KeptConnection:
    """A kept connection to ``scheme://host:port`` (opened on first use, again after a
    failure). Not thread-safe: one per thread or per caller that serialises its calls."""

    def __init__(self, scheme: str, host: str, port: int | None, timeout_s: float) -> None:
        self.scheme, self.host, self.port = scheme, host, port
        self.timeout_s = timeout_s
        self._conn: http.client.HTTPConnection | None = None

    def exchange(
        self,
        method: str,
        path: str,
        body: bytes | None,
        headers: Mapping[str, str],
        timeout_s: float | None = None,
    ) -> Answer:
        """``method path`` with ``body``: the answer, or the failure (an :class:`OSError` or
        :class:`http.client.HTTPException`) with the connection closed."""
        if timeout_s is not None:
            self.timeout_s = timeout_s
        reused = self._conn is not None
        try:
            try:
                return self._send(method, path, body, headers)
            except STALE:
                self.close()
                if not reused:
                    raise
                return self._send(method, path, body, headers)
        except (OSError, http.client.HTTPException):
            self.close()
            raise

    def close(self) -> None:
        """Close the connection (the next exchange opens a new one)."""
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    def _send(
        self, method: str, path: str, body: bytes | None, headers: Mapping[str, str]
    ) -> Answer:
        conn = self._conn
        if conn is None:
            conn = self._conn = self._open()
        conn.timeout = self.timeout_s
        if conn.sock is not None:
            conn.sock.settimeout(self.timeout_s)
        conn.request(method, path, body=body, headers=dict(headers))
        response = conn.getresponse()
        data = response.read()
        if response.will_close:
            self.close()
        return response.status, response.reason, cast("Mapping[str, str]", response.headers), data

    def _open(self) -> http.client.HTTPConnection:
        if self.scheme == "https":
            context = ssl.create_default_context()
            return http.client.HTTPSConnection(
                self.host, self.port, timeout=self.timeout_s, context=context
            )
        return http.client.HTTPConnection(self.host, self.port, timeout=self.timeout_s)
