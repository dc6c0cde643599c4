"""The extender wire format: kube-scheduler's ExtenderArgs in, ExtenderFilterResult and
HostPriorityList out, with the exact PascalCase keys of k8s.io/kube-scheduler/extender/v1."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sits_observe.control.extender.scoring import REQUEST_CAP, PodRequest
from sits_observe.control.extender.wire import (
    MAX_EXTENDER_PRIORITY,
    encode,
    filter_error,
    filter_result,
    host_priority_json,
    parse_extender_args,
)
from sits_observe.errors import ParseError
from tests.unit.control.extender_payloads import (
    CANDIDATES,
    POD_1GPU_JSON,
    POD_4GPU_JSON,
    POD_CPU_JSON,
    args_by_name,
    args_with_nodes,
    node_object,
    pod,
)

GIB = 1024**3

# A filter answer exactly as a Go extender built on extender/v1 would marshal it: the keys
# kube-scheduler's json.Decoder looks for.
FILTER_KEYS = {"Nodes", "NodeNames", "FailedNodes", "FailedAndUnresolvableNodes", "Error"}


def test_node_names_mode_reads_the_pod_and_the_names() -> None:
    call = parse_extender_args(args_by_name(POD_1GPU_JSON).encode())
    assert call.node_cache_capable
    assert call.nodes == tuple(CANDIDATES)
    assert call.node_items == ()
    # GPU only in limits: the request defaults to the limit. Owner ReplicaSet -> Deployment.
    assert call.pod == PodRequest(
        namespace="serve",
        name="llm-5d8f7c9b4-z2v9r",
        gpus=1,
        cpu_milli=1000,
        gpu_memory_bytes=None,
        priority=0,
        workload="llm",
        uid="6f1c2a8e-0d3b-4b8f-9a51-2c7e9d4f1a10",
        memory_bytes=16 * GIB,
    )


def test_nodes_mode_reads_names_from_the_node_objects() -> None:
    call = parse_extender_args(args_with_nodes(POD_4GPU_JSON).encode())
    assert not call.node_cache_capable
    assert call.nodes == tuple(CANDIDATES)
    assert [item["metadata"]["name"] for item in call.node_items] == CANDIDATES
    # Init container (12 CPU) runs before the app (8 CPU): the pod reserves max(8, 12) CPU.
    assert call.pod.cpu_milli == 12_000
    assert call.pod.gpus == 4
    assert call.pod.gpu_memory_bytes == 60 * GIB
    assert call.pod.priority == 500_000
    assert call.pod.workload == "finetune-7b"


def test_cpu_only_pod_requests_no_gpu() -> None:
    call = parse_extender_args(args_by_name(POD_CPU_JSON).encode())
    assert (call.pod.gpus, call.pod.cpu_milli, call.pod.workload) == (0, 500, "etl-9")


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"not json", "not a kube-scheduler ExtenderArgs"),
        (b"[]", "not a kube-scheduler ExtenderArgs"),
        (json.dumps({"Nodes": None, "NodeNames": ["a"]}).encode(), "no Pod"),
        (
            json.dumps({"Pod": pod(POD_CPU_JSON), "Nodes": None, "NodeNames": None}).encode(),
            "neither",
        ),
        # camelCase keys are not the wire format: kube-scheduler sends PascalCase.
        (json.dumps({"pod": pod(POD_CPU_JSON), "nodeNames": ["a"]}).encode(), "no Pod"),
        (json.dumps({"Pod": pod(POD_CPU_JSON), "NodeNames": "gpu-a"}).encode(), "NodeNames"),
        (
            json.dumps({"Pod": pod(POD_CPU_JSON), "Nodes": {"items": [{"metadata": {}}]}}).encode(),
            r"Nodes.items\[0\] has no metadata.name",
        ),
    ],
)
def test_bad_bodies_say_what_is_wrong(body: bytes, message: str) -> None:
    with pytest.raises(ParseError, match=message):
        parse_extender_args(body)


def test_bad_quantity_and_annotation_are_refused() -> None:
    bad_gpu = pod(POD_1GPU_JSON)
    bad_gpu["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "one"
    with pytest.raises(ParseError, match=r"unreadable quantity for nvidia\.com/gpu"):
        parse_extender_args(json.dumps({"Pod": bad_gpu, "NodeNames": ["a"]}).encode())
    bad_memory = pod(POD_4GPU_JSON)
    bad_memory["metadata"]["annotations"]["sits.io/gpu-memory"] = "lots"
    with pytest.raises(ParseError, match=r"sits\.io/gpu-memory='lots'"):
        parse_extender_args(json.dumps({"Pod": bad_memory, "NodeNames": ["a"]}).encode())


_EXTREME = [
    "1e16",
    "1e30",
    "1e400",
    "1e999999",
    "1e1000000",
    "9223372036854775808",
    "100Ei",
    "-1",
    "-1e400",
    "0.5",
    "1e-400",
    "NaN",
    "Infinity",
    "",
]


@given(
    resource=st.sampled_from(["nvidia.com/gpu", "cpu", "memory", "sits.io/gpu-memory"]),
    quantity=st.one_of(
        st.sampled_from(_EXTREME),
        st.integers(-(10**40), 10**40),
        st.floats(allow_nan=False, allow_infinity=False),
    ),
)
def test_any_quantity_reads_as_a_bounded_request_or_a_parse_error(
    resource: str, quantity: str | int | float
) -> None:
    """A quantity becomes an amount in 0..REQUEST_CAP (so the scorer's int64 arithmetic holds:
    1e16 GPUs is beyond every node, not an OverflowError) or a ParseError saying what is wrong;
    never another exception."""
    manifest = pod(POD_1GPU_JSON)
    if resource == "sits.io/gpu-memory":
        manifest["metadata"]["annotations"] = {resource: str(quantity)}
    else:
        manifest["spec"]["containers"][0]["resources"]["requests"][resource] = quantity
    try:
        call = parse_extender_args(json.dumps({"Pod": manifest, "NodeNames": ["a"]}).encode())
    except ParseError:
        return
    request = call.pod
    amounts = [request.gpus, request.cpu_milli, request.memory_bytes, request.gpu_memory_bytes]
    assert all(0 <= a <= REQUEST_CAP for a in amounts if a is not None)


def test_filter_result_by_name_has_exact_keys_and_explicit_lists() -> None:
    call = parse_extender_args(args_by_name(POD_1GPU_JSON).encode())
    result = json.loads(encode(filter_result(call, [], {"gpu-d": "busy"}, {"cpu-1": "no GPU"})))
    assert set(result) == FILTER_KEYS
    # An empty list, never null: a null NodeNames makes kube-scheduler read Nodes instead.
    assert result["NodeNames"] == []
    assert result["Nodes"] is None
    assert result["FailedNodes"] == {"gpu-d": "busy"}
    assert result["FailedAndUnresolvableNodes"] == {"cpu-1": "no GPU"}
    assert result["Error"] == ""


def test_filter_result_with_nodes_echoes_the_passing_objects_unchanged() -> None:
    call = parse_extender_args(args_with_nodes(POD_1GPU_JSON).encode())
    result = json.loads(encode(filter_result(call, ["gpu-c", "gpu-a"], {}, {})))
    assert result["NodeNames"] is None
    items = result["Nodes"]["items"]
    # Input order is kept (kube-scheduler maps them back by name) and objects are untouched.
    assert [i["metadata"]["name"] for i in items] == ["gpu-a", "gpu-c"]
    assert items[0] == node_object("gpu-a")


def test_filter_error_carries_only_the_message() -> None:
    result = json.loads(encode(filter_error("bad pod")))
    assert result == {
        "Nodes": None,
        "NodeNames": None,
        "FailedNodes": {},
        "FailedAndUnresolvableNodes": {},
        "Error": "bad pod",
    }


def test_host_priority_list_is_exact() -> None:
    body = host_priority_json(["gpu-a", 'we"ird'], [7, 0])
    assert body == b'[{"Host":"gpu-a","Score":7},{"Host":"we\\"ird","Score":0}]'
    assert json.loads(body) == [{"Host": "gpu-a", "Score": 7}, {"Host": 'we"ird', "Score": 0}]
    assert host_priority_json([], []) == b"[]"
    with pytest.raises(ValueError, match="2 hosts but 1 scores"):
        host_priority_json(["a", "b"], [1])


@given(
    st.lists(
        st.tuples(st.text(min_size=1, max_size=20), st.integers(0, MAX_EXTENDER_PRIORITY)),
        max_size=30,
    )
)
def test_host_priority_json_round_trips(entries: list[tuple[str, int]]) -> None:
    hosts = [h for h, _ in entries]
    scores = [s for _, s in entries]
    decoded = json.loads(host_priority_json(hosts, scores))
    assert decoded == [{"Host": h, "Score": s} for h, s in entries]
