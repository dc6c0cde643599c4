"""WATCH as the Kubernetes emulator serves it: kmock's watch with its gaps filled.

The initial state is taken and the bus subscribed to under the store's lock (so no change
falls between the two), only objects newer than the request's ``resourceVersion`` are sent
as ADDED, a watch ends at ``timeoutSeconds`` and when the emulator shuts down
(:attr:`WatchServing.closing`), and its namespace, name, label and field selectors apply to
every event (a bad selector answers 400 before the stream starts).
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import AsyncIterator
from typing import Any

import kmock
from kmock._internal.aiobus import Bus, BusMark

from sits_observe.lab.kube.object_store import JsonObject, ObjectStore
from sits_observe.lab.kube.query import matches, selectors


def _resource_version(obj: JsonObject) -> int:
    try:
        return int((obj.get("metadata") or {}).get("resourceVersion") or 0)
    except (TypeError, ValueError):
        return 0


class WatchServing(ObjectStore):
    """The emulator's WATCH: answers kmock's watch requests from its store and event buses."""

    def __init__(self) -> None:
        super().__init__()
        #: Set when the emulator shuts down: ends every open watch, so the shutdown is prompt.
        self.closing = asyncio.Event()

    async def _serve_watch(self, request: kmock.Request) -> AsyncIterator[kmock.Payload]:
        labels = request.params.get("labelSelector")
        fields = request.params.get("fieldSelector")
        # A bad selector answers 400 before the stream starts (kmock sends headers only with
        # the first chunk), not an ERROR event inside it.
        selectors(labels, fields)
        # Start the HTTP stream at once, as the API server does, even if nothing happens.
        yield b""
        loop = asyncio.get_running_loop()
        try:
            timeout_s = float(request.params.get("timeoutSeconds") or 0)
        except ValueError:
            timeout_s = 0.0
        deadline = loop.time() + timeout_s if timeout_s > 0 else None
        try:
            since = int(request.params.get("resourceVersion") or 0)
        except ValueError:
            since = 0
        assert request.resource is not None
        bus: Bus[Any] = self._buses[request.resource]
        async with self._lock:
            initial = [copy.deepcopy(o) for o in self._visible(request)]
            mark: BusMark[Any] = await bus.mark()
        try:
            for obj in initial:
                if _resource_version(obj) > since:
                    yield {"type": "ADDED", "object": obj}
            stream = bus.stream(since=mark)
            while True:
                event = await self._next_event(stream, deadline)
                if event is None:
                    return
                obj = event.get("object") or {}
                if (
                    request.namespace is not None
                    and (obj.get("metadata") or {}).get("namespace") != request.namespace
                ):
                    continue
                if (
                    request.name is not None
                    and (obj.get("metadata") or {}).get("name") != request.name
                ):
                    continue
                if matches(obj, labels, fields):
                    yield event
        finally:
            await bus.unmark(mark)

    async def _next_event(
        self, stream: AsyncIterator[JsonObject], deadline: float | None
    ) -> JsonObject | None:
        """The next bus event, or None at the deadline or when the emulator shuts down."""
        loop = asyncio.get_running_loop()
        nxt: asyncio.Future[Any] = asyncio.ensure_future(anext(stream))
        closing: asyncio.Future[Any] = asyncio.ensure_future(self.closing.wait())
        timeout = None if deadline is None else max(0.0, deadline - loop.time())
        done, _ = await asyncio.wait(
            [nxt, closing], timeout=timeout, return_when=asyncio.FIRST_COMPLETED
        )
        closing.cancel()
        if nxt in done:
            event: JsonObject = nxt.result()
            return event
        nxt.cancel()
        await asyncio.gather(nxt, return_exceptions=True)
        return None
