"""The service's listening sockets: every accepted connection has Nagle's algorithm off.

With it on, each answer written in two pieces (headers, then body) waited for the client's
delayed ACK: 44 ms a request over loopback instead of about 1 ms (found by
bench/bench_extender_cycle.py). asyncio turns it off only on sockets whose protocol number is
IPPROTO_TCP, so the socket ``bind`` makes must carry it.
"""

from __future__ import annotations

import asyncio
import socket

from sits_observe.surfaces.service.http.sockets import bind


def test_the_listening_socket_is_tcp_with_nodelay() -> None:
    sock = bind("127.0.0.1", 0, "--port")
    try:
        assert sock.proto == socket.IPPROTO_TCP
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 1
    finally:
        sock.close()


def test_accepted_connections_have_nodelay() -> None:
    seen: list[int] = []

    class Probe(asyncio.Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            accepted = transport.get_extra_info("socket")
            seen.append(accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
            transport.close()

    async def main() -> None:
        sock = bind("127.0.0.1", 0, "--port")
        server = await asyncio.get_running_loop().create_server(Probe, sock=sock)
        port = sock.getsockname()[1]
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        for _ in range(100):
            if seen:
                break
            await asyncio.sleep(0.01)
        writer.close()
        server.close()
        await server.wait_closed()

    asyncio.run(main())
    assert seen and seen[0] != 0
