"""plan() on owned pods: one decision per (workload, action) with the combine rule, what stays
on the pods, and namespace selection (opt-in / opt-out label)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import polars as pl

from sits_observe.control.controller.apply import writes_for
from sits_observe.control.controller.planning.inputs import CurrentState, History, Signals
from sits_observe.control.controller.planning.model import Plan
from sits_observe.control.controller.planning.plan import plan
from sits_observe.control.controller.settings import RULES_OFF_BY_DEFAULT, ControllerSettings

AT = datetime(2026, 11, 1, 12, 0, 0)
GIB = 1024**3
WEB = ("Deployment", "team", "web")
#: The fragmentation and memory-class rules are off by default where the controller writes.
RULES_ON = RULES_OFF_BY_DEFAULT  # every rule on: these tests write them all


def pods(*rows: dict[str, Any]) -> Signals:
    base = {"namespace": "team", "node": "n1"}
    return Signals.of(AT, pods=pl.DataFrame([{**base, **r} for r in rows]))


def state(
    owned: dict[str, str],
    *,
    extra: list[tuple[str, str | None, str, bool, bool | None]] = (),  # type: ignore[assignment]
    values: list[tuple[str, str | None, str, str, str | None, str | None]] = (),  # type: ignore[assignment]
    opted_out: tuple[str, ...] = (),
) -> CurrentState:
    """Pods (``owned``: pod -> its Deployment, "" for a bare pod), those Deployments, the
    namespace ``team``, and ``extra`` objects."""
    objects = [("Pod", "team", p, p in opted_out, None) for p in owned]
    objects += [("Deployment", "team", d, d in opted_out, None) for d in set(owned.values()) if d]
    objects += [("Namespace", None, "team", False, None), *extra]
    schema = ["kind", "namespace", "name", "opt_out", "enabled"]
    owners = [("team", p, "Deployment", d) for p, d in owned.items() if d]
    return CurrentState.of(
        objects=pl.DataFrame(objects, schema=schema, orient="row"),
        values=pl.DataFrame(
            list(values),
            schema=["kind", "namespace", "name", "action", "current", "recommended"],
            orient="row",
        )
        if values
        else None,
        owners=pl.DataFrame(
            owners, schema=["namespace", "pod", "owner_kind", "owner_name"], orient="row"
        )
        if owners
        else None,
    )


def rows(p: Plan, action: str) -> dict[tuple[str, str | None, str], dict[str, Any]]:
    return {
        (r["kind"], r["namespace"], r["name"]): r
        for r in p.frame.iter_rows(named=True)
        if r["action"] == action
    }


THREE = {"a": "web", "b": "web", "c": "web"}


def test_categorical_the_value_most_pods_got_with_the_evidence_of_how_many() -> None:
    sig = pods(
        {"pod": "a", "peak_gpu_memory_bytes": 3 * GIB},
        {"pod": "b", "peak_gpu_memory_bytes": 4 * GIB},
        {"pod": "c", "peak_gpu_memory_bytes": 12 * GIB},
    )
    found = rows(
        plan(sig, state(THREE), ControllerSettings(rules_on=RULES_ON, mode="annotate")),
        "memory-class",
    )
    assert list(found) == [WEB]  # no pod rows: the recommendation is the workload's
    web = found[WEB]
    assert (web["proposed"], web["workload"], web["skip"]) == ("L2", "team/web", None)
    evidence = json.loads(web["evidence"])
    assert (evidence["pods"], evidence["pods_agreeing"], evidence["pod"]) == (3, 2, "a")
    assert evidence["peak_gpu_memory_bytes"] == 3 * GIB  # pod a's own evidence follows
    assert web["reason"].startswith("2 of 3 pods: peak GPU memory 3.0 GiB")


def test_categorical_ties_go_to_the_conservative_value() -> None:
    settings = ControllerSettings(rules_on=RULES_ON, mode="annotate")
    two = {"a": "web", "b": "web"}
    # Memory class: L3 over L2.
    sig = pods(
        {"pod": "a", "peak_gpu_memory_bytes": 3 * GIB},
        {"pod": "b", "peak_gpu_memory_bytes": 12 * GIB},
    )
    assert rows(plan(sig, state(two), settings), "memory-class")[WEB]["proposed"] == "L3"
    # Time slice: the longer one (P95 > 10 ms -> 25 ms; a long sequence -> 10 ms).
    sig = pods(
        {"pod": "a", "p95_latency_s": 0.004, "sequence_tokens": 8000.0},
        {"pod": "b", "p95_latency_s": 0.02},
    )
    assert rows(plan(sig, state(two), settings), "time-slice")[WEB]["proposed"] == "25ms"
    # Priority class: the higher-priority one. Both pods violate their SLA; each is proposed
    # the class below its own.
    sig = pods(
        {"pod": "a", "priority_class": "ultra-low-latency", "sla_violation_ratio": 0.2},
        {"pod": "b", "priority_class": "throughput-guaranteed", "sla_violation_ratio": 0.2},
    )
    row = rows(plan(sig, state(two), settings), "priority-class")[WEB]
    assert row["proposed"] == "throughput-guaranteed"
    assert row["current"] == "ultra-low-latency"  # the pods' classes, combined the same way


def test_pods_within_their_sla_vote_for_keeping_the_priority_class() -> None:
    settings = ControllerSettings(rules_on=RULES_ON, mode="annotate")
    cls = "throughput-guaranteed"

    def rates(*values: float) -> Signals:
        return pods(
            *(
                {"pod": p, "priority_class": cls, "sla_violation_ratio": r}
                for p, r in zip("abc", values, strict=True)
            )
        )

    one = plan(rates(0.2, 0.0, 0.01), state(THREE), settings)
    assert rows(one, "priority-class") == {}  # 2 of 3 keep the class: unchanged
    assert one.suppressed["unchanged"] >= 1
    row = rows(plan(rates(0.2, 0.3, 0.0), state(THREE), settings), "priority-class")[WEB]
    assert (row["current"], row["proposed"]) == (cls, "best-effort")
    assert json.loads(row["evidence"])["pods_agreeing"] == 2


def qos_pods() -> Signals:
    """Three bronze-tier pods of web under a gold one on a contended GPU, all missing their
    SLA: each gets the elastic bandwidth quota min(tier x 1.2, its link capacity), so a and c
    (9 GB/s links) get 9e9 and b 9.6e9 (bronze: 8e9 x 1.2)."""
    hot = {"gpu_util_ratio": 0.95, "link_saturation_ratio": 0.8, "sla_p99_s": 0.1}
    slow = {"priority_class": "best-effort", **hot, "p99_latency_s": 0.3}
    return pods(
        {"pod": "top", "priority_class": "ultra-low-latency", **hot, "p99_latency_s": 0.01},
        {"pod": "a", **slow, "link_capacity_bytes_per_s": 9e9},
        {"pod": "b", **slow, "link_capacity_bytes_per_s": 900e9},
        {"pod": "c", **slow, "link_capacity_bytes_per_s": 9e9},
    )


def test_numeric_the_largest_proposal() -> None:
    settings = ControllerSettings(rules_on=RULES_ON, mode="annotate")
    p = plan(qos_pods(), state({"top": "", **THREE}), settings)
    web = rows(p, "qos-bandwidth-quota")[WEB]
    # b's is the largest: the safe side, although a and c (2 of 3) got less.
    assert (web["current"], web["proposed"]) == ("8000000000", "9600000000")
    evidence = json.loads(web["evidence"])
    assert (evidence["pods"], evidence["pods_agreeing"], evidence["pod"]) == (3, 1, "b")
    # Equal proposals combine to themselves: 2 GiB x 0.8 for each.
    memory = rows(p, "qos-memory-quota")[WEB]
    assert memory["proposed"] == str(int(2 * GIB * 0.8))
    assert json.loads(memory["evidence"])["pods_agreeing"] == 3


def test_act_mode_keeps_the_per_pod_changes_without_their_recommendation_annotation() -> None:
    sig = pods(
        {"pod": "a", "peak_gpu_memory_bytes": 3 * GIB},
        {"pod": "b", "peak_gpu_memory_bytes": 12 * GIB},
        {"pod": "solo", "peak_gpu_memory_bytes": 3 * GIB},
    )
    settings = ControllerSettings(rules_on=RULES_ON, mode="act")
    p = plan(sig, state({"a": "web", "b": "web", "solo": ""}), settings)
    found = rows(p, "memory-class")
    assert set(found) == {WEB, ("Pod", "team", "a"), ("Pod", "team", "b"), ("Pod", "team", "solo")}
    assert (found[("Pod", "team", "b")]["proposed"], found[("Pod", "team", "b")]["owner"]) == (
        "L3",
        "Deployment/web",
    )
    assert found[("Pod", "team", "solo")]["owner"] is None
    at = datetime(2026, 11, 1, tzinfo=UTC)
    writes = {
        (d.ref.kind, d.ref.name): [
            (c.target.kind, c.field, c.key) for c in writes_for(d, settings, at)
        ]
        for d in p.decisions()
        if str(d.action) == "memory-class"
    }
    rec = "sits.io/recommendation.memory-class"
    assert writes[("Deployment", "web")] == [("Deployment", "annotation", rec)]
    assert writes[("Pod", "b")] == [("Pod", "label", "sits.io/memory-class")]
    assert writes[("Pod", "solo")] == [
        ("Pod", "annotation", rec),
        ("Pod", "label", "sits.io/memory-class"),
    ]


def test_time_slices_are_written_once_per_workload_under_its_key() -> None:
    settings = ControllerSettings(
        rules_on=RULES_ON, mode="act", time_slicing_configmap="gpu-operator/ts"
    )
    sig = pods({"pod": "a", "p95_latency_s": 0.02}, {"pod": "b", "p95_latency_s": 0.02})
    st = state({"a": "web", "b": "web"})
    st = CurrentState.of(objects=st.objects, owners=st.owners, time_slices={"team/web": "15ms"})
    p = plan(sig, st, settings)
    [row] = rows(p, "time-slice").values()
    assert (row["kind"], row["name"], row["current"], row["proposed"]) == (
        "Deployment",
        "web",
        "15ms",
        "25ms",
    )
    [decision] = [d for d in p.decisions() if str(d.action) == "time-slice"]
    changes = writes_for(decision, settings, datetime(2026, 11, 1, tzinfo=UTC))
    assert [(c.target.kind, c.field, c.key, c.value) for c in changes] == [
        ("ConfigMap", "configmap", "team/web", "25ms"),
        ("Deployment", "annotation", "sits.io/recommendation.time-slice", changes[1].value),
    ]


def test_a_workload_holding_the_recommendation_is_not_rewritten_and_anchors_hysteresis() -> None:
    settings = ControllerSettings(rules_on=RULES_ON, mode="annotate")
    held = [("Deployment", "team", "web", "memory-class", None, "L2")]
    sig = pods({"pod": "a", "peak_gpu_memory_bytes": 3 * GIB})
    p = plan(sig, state({"a": "web"}, values=held), settings)
    assert rows(p, "memory-class") == {}
    assert p.suppressed["already-recommended"] == 1
    # 1.9 GiB is L1 from scratch; a pod whose workload holds L2 stays there (hysteresis 10%).
    low = pods({"pod": "a", "peak_gpu_memory_bytes": int(1.9 * GIB)})
    fresh = rows(plan(low, state({"a": "web"}), settings), "memory-class")
    assert fresh[WEB]["proposed"] == "L1"
    kept = plan(low, state({"a": "web"}, values=held), settings)
    assert rows(kept, "memory-class") == {}


def test_dry_run_remembers_what_it_recommended_for_a_workload() -> None:
    hist = History.of(
        pl.DataFrame(
            [
                {
                    "kind": "Deployment",
                    "namespace": "team",
                    "name": "web",
                    "action": "memory-class",
                    "proposed": "L2",
                    "outcome": "recommended",
                    "mode": "dry-run",
                    "decided_at": AT,
                    "changed_at": None,
                }
            ]
        )
    )
    sig = pods({"pod": "a", "peak_gpu_memory_bytes": 3 * GIB})
    p = plan(
        sig,
        state({"a": "web"}),
        ControllerSettings(rules_on=RULES_ON),
        hist,
    )
    assert rows(p, "memory-class") == {}
    assert p.suppressed["already-recommended"] == 1
    # Without that history the same pass recommends it.
    assert rows(
        plan(
            sig,
            state({"a": "web"}),
            ControllerSettings(rules_on=RULES_ON),
        ),
        "memory-class",
    )[WEB]


def test_a_workload_is_opted_out_by_itself_or_any_of_its_pods() -> None:
    sig = pods(
        {"pod": "a", "peak_gpu_memory_bytes": 3 * GIB},
        {"pod": "b", "peak_gpu_memory_bytes": 3 * GIB},
    )
    act = ControllerSettings(rules_on=RULES_ON, mode="act")
    for opted in (("web",), ("b",)):
        found = rows(
            plan(sig, state({"a": "web", "b": "web"}, opted_out=opted), act), "memory-class"
        )
        assert {k: r["skip"] for k, r in found.items()} == {
            WEB: "opt-out",
            ("Pod", "team", "a"): "opt-out" if opted == ("web",) else None,
            ("Pod", "team", "b"): "opt-out",
        }, opted


def test_a_workload_not_listed_is_gone() -> None:
    st = state({"a": "web"})
    st = CurrentState.of(
        objects=st.objects.filter(pl.col("kind") != "Deployment"), owners=st.owners
    )
    sig = pods({"pod": "a", "peak_gpu_memory_bytes": 3 * GIB})
    assert (
        rows(
            plan(sig, st, ControllerSettings(rules_on=RULES_ON, mode="annotate")),
            "memory-class",
        )[WEB]["skip"]
        == "gone"
    )


# -- namespace selection ---------------------------------------------------------------------


def selection_state(label: bool | None) -> CurrentState:
    objects = [
        ("Pod", "team", "solo", False, None),
        ("Namespace", None, "team", False, label),
        ("Node", None, "n1", False, None),
    ]
    return CurrentState.of(
        objects=pl.DataFrame(
            objects, schema=["kind", "namespace", "name", "opt_out", "enabled"], orient="row"
        )
    )


def selection_signals() -> Signals:
    return Signals.of(
        AT,
        pods=pl.DataFrame(
            [{"namespace": "team", "pod": "solo", "node": "n1", "peak_gpu_memory_bytes": 3 * GIB}]
        ),
        nodes=pl.DataFrame({"node": ["n1"], "fragmentation_ratio": [0.8]}),
        namespaces=pl.DataFrame(
            {
                "namespace": ["team"],
                "resource": ["requests.nvidia.com/gpu"],
                "daily_peaks": [[4.0] * 14],
            }
        ),
    )


def skips(label: bool | None, selection: str) -> dict[str, str | None]:
    settings = ControllerSettings(rules_on=RULES_ON, mode="act", namespace_selection=selection)  # type: ignore[arg-type]
    p = plan(selection_signals(), selection_state(label), settings)
    return {f"{r['kind']}:{r['action']}": r["skip"] for r in p.frame.iter_rows(named=True)}


def test_the_namespace_label_opts_in_and_out() -> None:
    # Default (opt-out selection): unlabelled and true are in, false is out.
    for label in (None, True):
        assert set(skips(label, "opt-out").values()) == {None}, label
    assert skips(False, "opt-out") == {
        "Pod:memory-class": "opt-out",
        "Namespace:quota-gpu": "opt-out",  # the namespace's own quota advice too
        "Node:fragmentation": None,  # nodes are in no namespace
    }
    # Opt-in selection: only a namespace labelled true.
    assert skips(None, "opt-in") == {
        "Pod:memory-class": "not-opted-in",
        "Namespace:quota-gpu": "not-opted-in",
        "Node:fragmentation": None,
    }
    assert set(skips(True, "opt-in").values()) == {None}
    assert skips(False, "opt-in")["Pod:memory-class"] == "opt-out"


def test_offline_every_namespace_is_selected() -> None:
    settings = ControllerSettings(rules_on=RULES_ON, namespace_selection="opt-in")  # type: ignore[arg-type]
    p = plan(selection_signals(), CurrentState.of(complete=False), settings)
    assert set(p.frame.get_column("skip").to_list()) == {None}
