"""The listening sockets of ``serve``, bound before anything else exists.

A port in use is then a one-line :class:`~sits_observe.errors.ConfigError` that leaves no
database file behind. Apart from :mod:`.server` (which imports uvicorn), so that ``serve``
binds its ports, opens the store and starts the extender's first view build before the
HTTP server's modules import: DuckDB releases the GIL while it reads, and the imports run
meanwhile (docs/extender.md, cold start).
"""

from __future__ import annotations

import errno
import socket

from sits_observe.errors import ConfigError


def bind(host: str, port: int, what: str) -> socket.socket:
    """A listening TCP socket on ``host:port``; :class:`ConfigError` when it cannot be had."""
    try:
        info = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        family, kind, proto = info[0][:3]
        # The protocol number matters: asyncio turns Nagle's algorithm off only on sockets
        # whose proto is IPPROTO_TCP, and with it on every answer waited for the client's
        # delayed ACK (40 ms a request on Linux).
        sock = socket.socket(family, kind, proto)
    except OSError as exc:
        raise ConfigError(f"cannot listen on {host}:{port} ({what}): {exc}") from exc
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.bind(info[0][4])
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        hint = (
            "another process is listening there; stop it or choose another port"
            if exc.errno == errno.EADDRINUSE
            else "check the address"
        )
        raise ConfigError(
            f"cannot listen on {host}:{port} ({what}): {exc.strerror or exc}; {hint}"
        ) from exc
    sock.setblocking(False)
    return sock
