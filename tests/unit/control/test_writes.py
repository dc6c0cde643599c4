"""What each mode writes for a decision, retries with backoff, and settings validation."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from sits_observe.control.controller.actions import Action
from sits_observe.control.controller.apply import rfc3339, writes_for
from sits_observe.control.controller.kube import object_path, retryable, with_retries
from sits_observe.control.controller.planning.model import (
    Change,
    Decision,
    ObjectRef,
    Recommendation,
    recommendation_annotation,
)
from sits_observe.control.controller.settings import ControllerSettings
from sits_observe.errors import KubeApiError

AT = datetime(2026, 11, 1, 12, 0, 0, tzinfo=UTC)
NODE = ObjectRef("Node", None, "n1")
POD = ObjectRef("Pod", "team", "p1")


def decision(ref: ObjectRef, action: Action, proposed: str, **kw: object) -> Decision:
    skip = kw.pop("skip", None)
    rec = Recommendation(ref, action, None, proposed, "because", {"x": 1}, **kw)  # type: ignore[arg-type]
    return Decision(rec, skip)  # type: ignore[arg-type]


def fields(changes: tuple[Change, ...]) -> list[tuple[str, str, str, str | None]]:
    return [(str(c.target), c.field, c.key, c.value) for c in changes]


def test_dry_run_writes_nothing() -> None:
    assert writes_for(decision(NODE, Action.FRAGMENTATION, "high"), ControllerSettings(), AT) == ()


def test_annotate_writes_only_the_recommendation_annotation() -> None:
    changes = writes_for(
        decision(NODE, Action.FRAGMENTATION, "high"), ControllerSettings(mode="annotate"), AT
    )
    [change] = changes
    assert (change.target, change.field, change.key) == (
        NODE,
        "annotation",
        "sits.io/recommendation.fragmentation",
    )
    body = json.loads(str(change.value))
    assert body == {
        "proposed": "high",
        "current": None,
        "reason": "because",
        "evidence": {"x": 1},
        "mode": "annotate",
        "at": "2026-11-01T12:00:00.000000Z",
    }


def test_act_adds_the_change_where_the_api_can_carry_it() -> None:
    s = ControllerSettings(mode="act")
    assert fields(writes_for(decision(NODE, Action.FRAGMENTATION, "high"), s, AT))[1] == (
        "Node n1",
        "label",
        "sits.io/fragmentation",
        "high",
    )
    assert fields(writes_for(decision(POD, Action.QOS_MEMORY_QUOTA, "123"), s, AT))[1] == (
        "Pod team/p1",
        "annotation",
        "sits.io/qos-memory-quota-bytes",
        "123",
    )
    rq = ObjectRef("ResourceQuota", "team", "sits-quota")
    assert fields(writes_for(decision(rq, Action.QUOTA_CPU, "12500"), s, AT))[1] == (
        "ResourceQuota team/sits-quota",
        "quota",
        "requests.cpu",
        "12500m",
    )
    # Recommendation-only: annotation alone, even in act mode.
    for ref, action in (
        (NODE, Action.TOPOLOGY_POLICY),
        (POD, Action.PRIORITY_CLASS),
        (POD, Action.TIME_SLICE),
        (ObjectRef("Namespace", None, "team"), Action.QUOTA_GPU),
    ):
        [only] = writes_for(decision(ref, action, "x"), s, AT)
        assert only.key == recommendation_annotation(action)


def test_act_writes_the_configmap_entry_first_when_one_is_configured() -> None:
    s = ControllerSettings(mode="act", time_slicing_configmap="gpu-operator/ts")
    changes = writes_for(decision(POD, Action.TIME_SLICE, "25ms", workload="team/chat"), s, AT)
    assert fields(changes)[0] == ("ConfigMap gpu-operator/ts", "configmap", "team/chat", "25ms")
    assert changes[1].target == POD


def test_a_skipped_decision_writes_nothing() -> None:
    s = ControllerSettings(mode="act")
    assert writes_for(decision(NODE, Action.FRAGMENTATION, "high", skip="opt-out"), s, AT) == ()


def test_microtime_always_has_six_fraction_digits() -> None:
    assert rfc3339(datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)) == "2026-01-02T03:04:05.000000Z"


def test_object_paths() -> None:
    assert object_path("Node", None, "n1") == "/api/v1/nodes/n1"
    assert object_path("Pod", "a b", "p") == "/api/v1/namespaces/a%20b/pods/p"
    with pytest.raises(ValueError, match="namespace"):
        object_path("Pod", None, "p")
    with pytest.raises(ValueError, match="valid"):
        object_path("Deployment", "a", "b")


# -- retries ---------------------------------------------------------------------------------


def flaky(*statuses: int, retry_after: float | None = None) -> object:
    calls = []

    def call() -> str:
        calls.append(1)
        if len(calls) <= len(statuses):
            raise KubeApiError("boom", status=statuses[len(calls) - 1], retry_after_s=retry_after)
        return "ok"

    return call


def test_retries_back_off_exponentially_then_succeed() -> None:
    slept: list[float] = []
    result = with_retries(
        flaky(503, 409, 429),
        max_attempts=5,
        backoff_base_s=0.5,
        backoff_max_s=10,
        sleep=slept.append,
    )  # type: ignore[arg-type]
    assert (result.value, result.error, result.attempts) == ("ok", None, 4)
    assert slept == [0.5, 1.0, 2.0]


def test_retry_after_is_honoured_and_capped() -> None:
    slept: list[float] = []
    with_retries(
        flaky(429, 429, retry_after=30),
        max_attempts=5,
        backoff_base_s=0.5,
        backoff_max_s=10,
        sleep=slept.append,
    )  # type: ignore[arg-type]
    assert slept == [10, 10]
    slept.clear()
    with_retries(
        flaky(429, retry_after=3),
        max_attempts=5,
        backoff_base_s=0.5,
        backoff_max_s=10,
        sleep=slept.append,
    )  # type: ignore[arg-type]
    assert slept == [3]


def test_tries_are_bounded_and_client_errors_are_not_retried() -> None:
    slept: list[float] = []
    result = with_retries(
        flaky(500, 500, 500, 500),
        max_attempts=3,
        backoff_base_s=1,
        backoff_max_s=10,
        sleep=slept.append,
    )  # type: ignore[arg-type]
    assert result.attempts == 3 and result.error is not None and result.error.status == 500
    for status in (400, 403, 404, 422):
        result = with_retries(
            flaky(status), max_attempts=5, backoff_base_s=1, backoff_max_s=10, sleep=slept.append
        )  # type: ignore[arg-type]
        assert result.attempts == 1 and result.error is not None
    assert retryable(0) and retryable(502) and not retryable(404)


# -- settings --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("values", "match"),
    [
        ({"renew_deadline_s": 20, "lease_duration_s": 15}, "renew_deadline_s"),
        ({"time_slicing_configmap": "no-slash"}, "NAMESPACE/NAME"),
        ({"tier_by_priority_class": {"x": "platinum"}}, "platinum"),
        ({"fragmentation_medium_above_ratio": 0.8}, "fragmentation"),
        ({"hysteresis_ratio": 1.5}, "hysteresis_ratio"),
        ({"mode": "yolo"}, "mode"),
    ],
)
def test_settings_reject_bad_values(values: dict[str, object], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        ControllerSettings.model_validate(values)


def test_settings_defaults_are_safe() -> None:
    s = ControllerSettings()
    assert s.dry_run and not s.writes
    assert s.opt_out_annotation == "sits.io/opt-out"
    assert ControllerSettings(time_slicing_configmap="gpu-operator/ts").time_slicing_ref() == (
        "gpu-operator",
        "ts",
    )
