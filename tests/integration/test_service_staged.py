"""``serve``'s staged start over real HTTP on loopback (:mod:`.service.staged`).

The service's app is held back by a build function that waits for the test, so each stage is
observed, not raced: the extender answers from a real store while the rest of the service is
"importing", other requests wait for it (or get 503 once ``wait_s`` is out), ``/readyz`` says
starting, and the extender's calls in stage 1 are counted on the same registry the service's
``/metrics`` shows later.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator, MutableMapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from sits_observe.errors import ConfigError
from sits_observe.store import Store
from sits_observe.surfaces.service import ServiceSettings, create_app
from sits_observe.surfaces.service.extender import (
    ExtenderSettings,
    create_extender_app,
    serve_extender,
)
from sits_observe.surfaces.service.http.staged import StagedApp
from sits_observe.surfaces.service.metrics import ServiceMetrics
from tests.integration.test_extender_http import FILTER, TOKEN, ServedApp, post
from tests.unit.control.extender_payloads import POD_1GPU_JSON, args_by_name
from tests.unit.control.extender_support import NOW, write_cluster

AUTH = {"Authorization": f"Bearer {TOKEN}"}
CALLED = 'sits_extender_calls_total{outcome="scored",verb="filter"} 1.0'


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store.open(tmp_path / "staged.duckdb") as s:
        write_cluster(s)
        yield s


class Stages:
    """A staged app over ``store`` whose stage 2 waits for :attr:`release`."""

    def __init__(self, store: Store, *, fail: bool = False, wait_s: float = 30.0) -> None:
        self.release = threading.Event()
        self.failures: list[BaseException] = []
        self.writers: list[threading.Thread] = []  # the group-commit thread create_app started
        settings = ServiceSettings(token=TOKEN, retention_interval_s=0)  # type: ignore[arg-type]
        metrics = ServiceMetrics()
        serving = serve_extender(
            store, metrics, None, settings=ExtenderSettings(warm_view=True), clock=lambda: NOW
        )
        assert serving.endpoints is not None
        cache = serving.endpoints.cache

        def build() -> object:
            assert self.release.wait(30), "the test never released stage 2"
            if fail:
                raise ConfigError("no usable token")
            before = set(threading.enumerate())
            app = create_app(
                settings, store, clock=lambda: NOW, metrics=metrics, extender_serving=serving
            )
            self.writers = [
                t for t in set(threading.enumerate()) - before if t.name == "group-commit"
            ]
            return app

        self.app = StagedApp(
            build,  # type: ignore[arg-type]
            extender=create_extender_app(serving.endpoints, metrics, settings.http),
            first_view=lambda: cache.wait(10),
            wait_s=wait_s,
            on_failure=self.failures.append,
        )


def in_background(call: Callable[[], httpx.Response]) -> tuple[ThreadPoolExecutor, object]:
    pool = ThreadPoolExecutor(1)
    return pool, pool.submit(call)


def test_the_extender_answers_while_the_service_starts_and_the_rest_waits(store: Store) -> None:
    stages = Stages(store)
    with ServedApp(stages.app) as client:
        # Stage 1: the extender's answer is the full one (the view of the whole store).
        result = post(client, FILTER, args_by_name(POD_1GPU_JSON)).json()
        assert result["NodeNames"] == ["gpu-a", "gpu-b", "new-node"]
        assert client.get("/healthz").json() == {"status": "ok"}
        ready = client.get("/readyz")
        assert (ready.status_code, ready.json()["reason"]) == (503, "not_ready")
        pool, waiting = in_background(lambda: client.get("/api/v1/tables", headers=AUTH))
        try:
            assert not waiting.done()  # type: ignore[attr-defined]
            assert stages.app.app is None
            stages.release.set()
            tables = waiting.result(timeout=30)  # type: ignore[attr-defined]
        finally:
            pool.shutdown()
        # Stage 2: the service's app answered the request that waited, and serves everything.
        assert tables.status_code == 200 and "nodes" in tables.text
        assert client.get("/readyz").status_code == 200
        assert client.get("/api/v1/tables").status_code == 401  # its auth, not stage 1's
        metrics = client.get("/metrics").text
        assert CALLED in metrics  # the stage-1 call, on the service's registry
        assert post(client, FILTER, args_by_name(POD_1GPU_JSON)).status_code == 200
        assert 'sits_extender_calls_total{outcome="scored",verb="filter"} 2.0' in (
            client.get("/metrics").text
        )
    assert stages.failures == []


def test_a_request_that_waits_too_long_gets_503_and_retry_after(store: Store) -> None:
    stages = Stages(store, wait_s=0.2)
    with ServedApp(stages.app) as client:
        refused = client.get("/api/v1/tables", headers=AUTH)
        assert refused.status_code == 503
        assert refused.headers["retry-after"] == "1"
        assert refused.json() == {"reason": "not_ready", "detail": "the service is starting"}
        stages.release.set()


def test_a_failed_stage_two_is_reported_and_refused(store: Store) -> None:
    stages = Stages(store, fail=True)
    with ServedApp(stages.app) as client:
        pool, waiting = in_background(lambda: client.get("/api/v1/tables", headers=AUTH))
        try:
            stages.release.set()
            refused = waiting.result(timeout=30)  # type: ignore[attr-defined]
        finally:
            pool.shutdown()
        assert refused.status_code == 503
        assert refused.json()["detail"] == "the service failed to start"
        assert [str(e) for e in stages.failures] == ["no usable token"]
        assert isinstance(stages.app.failure, ConfigError)
        # The extender keeps answering until the servers stop (serve stops them at once).
        assert post(client, FILTER, args_by_name(POD_1GPU_JSON)).status_code == 200


def test_a_shutdown_during_stage_one_stops_what_stage_two_started(store: Store) -> None:
    """Shut down before the app exists: the shutdown waits for the build, then runs the app's
    lifespan to its end (its group-commit writer stopped) before it reports complete. Driven
    through the ASGI lifespan messages in one event loop, checked before that loop closes
    (closing it would also finish a lifespan left open)."""
    stages = Stages(store)
    sent: list[str] = []

    async def drive() -> bool:
        inbox: asyncio.Queue[dict[str, str]] = asyncio.Queue()

        async def send(message: MutableMapping[str, object]) -> None:
            sent.append(str(message["type"]))

        lifespan = asyncio.create_task(
            stages.app({"type": "lifespan"}, inbox.get, send)  # type: ignore[arg-type]
        )
        inbox.put_nowait({"type": "lifespan.startup"})
        inbox.put_nowait({"type": "lifespan.shutdown"})  # before stage 2 could start
        await asyncio.sleep(0.3)
        assert sent == ["lifespan.startup.complete"]  # shutdown waits for the build
        stages.release.set()
        await asyncio.wait_for(lifespan, 30)
        return bool(stages.writers) and not stages.writers[0].is_alive()

    assert asyncio.run(drive()) is True
    assert sent == ["lifespan.startup.complete", "lifespan.shutdown.complete"]
    assert stages.app.app is not None and len(stages.writers) == 1
