"""The extender's request handling, bytes in and bytes out (control.extender_handler): every
body gets a kube-scheduler answer, the extreme ones and the ones that break the scorer too.

Cluster: tests.unit.control.extender_support (gpu-a/b/d 8 x H100, gpu-c 4 x L40S, cpu-1 no
GPU; ``new-node`` is not in the inventory and passes, ``unknown_nodes: pass``)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sits_observe.control.extender.handler as handler_module
from sits_observe.control.extender.bind import Binder
from sits_observe.control.extender.clusterview.view import ClusterView, build_view
from sits_observe.control.extender.clusterview.view_settings import ViewSettings
from sits_observe.control.extender.handler import Answer, ExtenderHandler
from sits_observe.control.extender.scoring import REQUEST_CAP
from sits_observe.control.extender.scoring_settings import ScoringSettings
from sits_observe.control.extender.wire import MAX_EXTENDER_PRIORITY
from sits_observe.store import Store
from tests.unit.control.extender_payloads import (
    CANDIDATES,
    POD_1GPU_JSON,
    POD_4GPU_JSON,
    POD_CPU_JSON,
    node_object,
    pod,
)
from tests.unit.control.extender_support import NOW, write_cluster

FILTER_KEYS = {"Nodes", "NodeNames", "FailedNodes", "FailedAndUnresolvableNodes", "Error"}
GPU_NODES = {"gpu-a", "gpu-b", "gpu-c", "gpu-d"}

#: Quantities no API server would let through, and a few it would: huge (1e16 GPUs, 2^63,
#: 1e400, 1e999999, exponents past Decimal's range), negative, fractional, NaN-like, empty.
EXTREME_TEXT = [
    "1e16",
    "10000000000000000",
    "9223372036854775807",
    "9223372036854775808",
    "1000000000000000000000000000000",
    "1e30",
    "1e400",
    "-1e400",
    "1e999999",
    "9e999999",
    "1e1000000",
    "1e99999999999999999999",
    "1e-400",
    "100Ei",
    "1E",
    "-1",
    "-0.5",
    "0.5",
    "0.001",
    "1m",
    "0",
    "NaN",
    "nan",
    "Infinity",
    "-inf",
    "",
    "1e16m",
    "12abc",
]
#: JSON numbers as Go or a hand-written client might send them (written into the body raw).
EXTREME_JSON_NUMBERS = ["1e16", "1e400", "-1e400", "1" + "0" * 30, "1e-400", "-1", "0.5", "NaN"]

QUANTITIES = st.one_of(
    st.sampled_from(EXTREME_TEXT).map(json.dumps),
    st.sampled_from(EXTREME_JSON_NUMBERS),
    st.integers(-(10**40), 10**40).map(str),
    st.floats(allow_nan=False, allow_infinity=False).map(json.dumps),
)


@pytest.fixture(scope="module")
def view(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterView]:
    path: Path = tmp_path_factory.mktemp("handler") / "cluster.duckdb"
    with Store.open(path) as store:
        write_cluster(store)
        yield build_view(store, NOW, ViewSettings())


def handler(score_mode: str = "ranked") -> ExtenderHandler:
    scoring = ScoringSettings(score_mode=score_mode)
    return ExtenderHandler(scoring, max_snapshot_age_s=300, clock=lambda: NOW)


def body_with(base: str, where: str, raw_json: str, *, with_nodes: bool = False) -> bytes:
    """ExtenderArgs for ``base`` with one quantity replaced by ``raw_json`` (JSON text, so
    numbers such as ``1e400`` reach the parser as written): ``where`` is a resource of the
    first container's requests, or ``annotation`` for ``sits.io/gpu-memory``."""
    manifest = pod(base)
    if where == "annotation":
        manifest["metadata"].setdefault("annotations", {})["sits.io/gpu-memory"] = "@Q@"
    else:
        manifest["spec"]["containers"][0]["resources"].setdefault("requests", {})[where] = "@Q@"
    args: dict[str, Any] = {"Pod": manifest, "Nodes": None, "NodeNames": CANDIDATES}
    if with_nodes:
        items = [node_object(n) for n in CANDIDATES]
        args.update(Nodes={"metadata": {}, "items": items}, NodeNames=None)
    return json.dumps(args).replace('"@Q@"', raw_json).encode()


def check_filter(answer: Answer, *, with_nodes: bool) -> dict[str, Any]:
    """An ``ExtenderFilterResult``, HTTP 200, with explicit lists unless it carries an Error."""
    assert answer.status == 200
    result: dict[str, Any] = json.loads(answer.body)
    assert set(result) == FILTER_KEYS
    if result["Error"]:
        assert answer.outcome == "bad_request"
        assert result["Nodes"] is None and result["NodeNames"] is None
        return result
    assert answer.outcome == "scored"
    passing = (
        [item["metadata"]["name"] for item in result["Nodes"]["items"]]
        if with_nodes
        else result["NodeNames"]
    )
    rejected = set(result["FailedNodes"]) | set(result["FailedAndUnresolvableNodes"])
    assert sorted([*passing, *rejected]) == sorted(CANDIDATES)
    return result


def check_prioritize(answer: Answer) -> list[dict[str, Any]] | None:
    """A ``HostPriorityList`` of every candidate, 0-10, or a 400 for an unreadable body."""
    if answer.status == 400:
        assert answer.outcome == "bad_request"
        assert set(json.loads(answer.body)) == {"detail", "reason"}
        return None
    assert (answer.status, answer.outcome) == (200, "scored")
    scores: list[dict[str, Any]] = json.loads(answer.body)
    assert [s["Host"] for s in scores] == CANDIDATES
    assert all(0 <= s["Score"] <= MAX_EXTENDER_PRIORITY for s in scores)
    return scores


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    base=st.sampled_from([POD_1GPU_JSON, POD_4GPU_JSON, POD_CPU_JSON]),
    where=st.sampled_from(["nvidia.com/gpu", "cpu", "memory", "annotation"]),
    raw=QUANTITIES,
    with_nodes=st.booleans(),
    score_mode=st.sampled_from(["ranked", "absolute"]),
)
def test_every_quantity_gets_a_protocol_answer_from_both_verbs(
    view: ClusterView, base: str, where: str, raw: str, with_nodes: bool, score_mode: str
) -> None:
    """Whatever the quantity, filter answers an ExtenderFilterResult (HTTP 200) and prioritize
    a HostPriorityList of every candidate (or 400 for an unreadable body): never an internal
    error. A GPU request beyond every node fails every GPU node and scores them all 0."""
    verbs = handler(score_mode)
    body = body_with(base, where, raw, with_nodes=with_nodes)
    filtered = check_filter(verbs.filter(body, view), with_nodes=with_nodes)
    scores = check_prioritize(verbs.prioritize(body, view))
    assert (scores is None) == bool(filtered["Error"])  # the same bodies are refused
    if where != "nvidia.com/gpu" or scores is None:
        return
    try:
        gpus = float(json.loads(raw) if raw.startswith('"') else raw)
    except ValueError:
        return
    if gpus > 8:  # more than any node has
        assert set(filtered["FailedAndUnresolvableNodes"]) >= GPU_NODES
        gpu_scores = {s["Host"]: s["Score"] for s in scores if s["Host"] in GPU_NODES}
        assert gpu_scores == dict.fromkeys(GPU_NODES, 0)


@pytest.mark.parametrize("gpus", ['"1e16"', "1e16", str(10**30), '"1e400"', '"1e999999"'])
@pytest.mark.parametrize("with_nodes", [False, True])
def test_a_pod_asking_more_gpus_than_any_node_fits_nowhere(
    view: ClusterView, gpus: str, with_nodes: bool
) -> None:
    """The reported case: 1e16 nvidia.com/gpu made prioritize answer HTTP 500 (OverflowError
    in the FGD index's int64 arithmetic). Now the request is held at REQUEST_CAP: filter fails
    every GPU node as unresolvable (the unknown new-node still passes), prioritize scores 0."""
    verbs = handler()
    body = body_with(POD_1GPU_JSON, "nvidia.com/gpu", gpus, with_nodes=with_nodes)
    scores = check_prioritize(verbs.prioritize(body, view))
    assert scores == [{"Host": n, "Score": 0} for n in CANDIDATES]
    filtered = check_filter(verbs.filter(body, view), with_nodes=with_nodes)
    assert set(filtered["FailedAndUnresolvableNodes"]) == GPU_NODES | {"cpu-1"}
    assert filtered["FailedAndUnresolvableNodes"]["gpu-a"] == (
        f"node has 8 allocatable nvidia.com/gpu, pod requests at least {REQUEST_CAP} (2**50)"
    )


def test_a_quantity_past_decimals_range_is_capped_not_an_error(view: ClusterView) -> None:
    """``1e1000000`` CPU raised decimal.Overflow out of the parser (filter and prioritize then
    answered HTTP 500); it is capped at 2^63-1 like any huge quantity: fits nowhere."""
    verbs = handler()
    body = body_with(POD_1GPU_JSON, "cpu", '"1e1000000"')
    assert check_filter(verbs.filter(body, view), with_nodes=False)["Error"] == ""
    scores = check_prioritize(verbs.prioritize(body, view))
    assert scores == [{"Host": n, "Score": 0} for n in CANDIDATES]


def broken(*_: object, **__: object) -> Any:
    raise RuntimeError("scorer bug")


@pytest.mark.parametrize("target", ["filter_nodes", "parse_extender_args"])
def test_an_internal_error_in_filter_is_reported_in_error(
    view: ClusterView, monkeypatch: pytest.MonkeyPatch, target: str
) -> None:
    """An unexpected exception while scoring or reading the body: HTTP 200 with the reason in
    ``Error`` (kube-scheduler reports it), outcome ``error`` for the metrics."""
    monkeypatch.setattr(handler_module, target, broken)
    body = body_with(POD_1GPU_JSON, "nvidia.com/gpu", '"1"')
    answer = handler().filter(body, view)
    assert (answer.status, answer.outcome) == (200, "error")
    result = json.loads(answer.body)
    assert set(result) == FILTER_KEYS
    assert result["Error"] == "sits-observe extender internal error: RuntimeError: scorer bug"
    assert result["NodeNames"] is None


@pytest.mark.parametrize(
    ("target", "expected"),
    [("prioritize", [{"Host": n, "Score": 0} for n in CANDIDATES]), ("parse_extender_args", [])],
)
def test_an_internal_error_in_prioritize_scores_every_node_0(
    view: ClusterView, monkeypatch: pytest.MonkeyPatch, target: str, expected: list[Any]
) -> None:
    """It was HTTP 500; now HTTP 200 and a HostPriorityList of zeros (no effect on the
    ranking; empty when the body was never read), outcome ``error`` for the metrics."""
    monkeypatch.setattr(handler_module, target, broken)
    body = body_with(POD_1GPU_JSON, "nvidia.com/gpu", '"1"')
    answer = handler().prioritize(body, view)
    assert (answer.status, answer.outcome) == (200, "error")
    assert json.loads(answer.body) == expected


def test_an_internal_error_in_bind_is_a_binding_result(view: ClusterView) -> None:
    class BrokenBinder(Binder):
        def bind(self, body: bytes, view: ClusterView | None) -> Any:
            raise RuntimeError("binder bug")

    verbs = ExtenderHandler(
        ScoringSettings(),
        max_snapshot_age_s=300,
        clock=lambda: NOW,
        binder=BrokenBinder(object(), scoring=ScoringSettings(), gpu_hint=True, assume=print),  # type: ignore[arg-type]
    )
    answer = verbs.bind(b'{"PodName": "a", "PodNamespace": "b", "Node": "gpu-a"}', view)
    assert (answer.status, answer.outcome) == (200, "error")
    assert json.loads(answer.body) == {
        "Error": "sits-observe extender internal error: RuntimeError: binder bug"
    }
