"""Spans out, in process: a controller pass and the ``span`` helper, exported over OTLP/HTTP.

The global OpenTelemetry provider can be set once per process, so this module installs an
SDK provider (or reuses one already installed) and adds a processor exporting with the real
``OTLPSpanExporter`` to the loopback receiver of ``test_otel_spans_out``. A controller pass
on the Kubernetes emulator must arrive as ``sits.plan`` and ``sits.apply`` spans with
``scheduler.task.type`` and the number of pending decisions as ``scheduler.task.queue.depth``.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from sits_observe.collectors.kube.api import KubeJson
from sits_observe.tracing import QUEUE_DEPTH, TASK_TYPE, span, traced
from tests.integration.control.conftest import FakeClock, seed
from tests.integration.control.test_loop import Replica
from tests.integration.test_otel_spans_out import SpanReceiver

pytestmark = pytest.mark.k8s


class Switchable(SimpleSpanProcessor):
    """Exports while on; turned off when the module ends (a provider keeps its processors)."""

    on = True

    def on_end(self, span: ReadableSpan) -> None:
        if self.on:
            super().on_end(span)


@pytest.fixture(scope="module")
def receiver() -> Iterator[SpanReceiver]:
    with SpanReceiver() as r:
        provider = trace.get_tracer_provider()
        if not isinstance(provider, TracerProvider):
            provider = TracerProvider()
            trace.set_tracer_provider(provider)
        assert trace.get_tracer_provider() is provider
        processor = Switchable(OTLPSpanExporter(endpoint=r.url + "/v1/traces", timeout=10))
        provider.add_span_processor(processor)
        try:
            yield r
        finally:
            processor.on = False


def test_a_controller_pass_exports_plan_and_apply_spans(
    receiver: SpanReceiver, kube: KubeJson, clock: FakeClock
) -> None:
    seed(kube)
    replica = Replica(kube, clock, "a")
    report = replica.loop.run_once()
    assert report.leader and report.decisions > 0
    (plan,) = receiver.named("sits.plan")
    (apply,) = receiver.named("sits.apply")
    assert plan.attributes[TASK_TYPE] == "plan"
    assert apply.attributes[TASK_TYPE] == "apply"
    # Every decision the plan made waits to be applied: both spans carry that queue.
    assert plan.attributes[QUEUE_DEPTH] == report.decisions
    assert apply.attributes[QUEUE_DEPTH] == report.decisions
    assert not plan.error and not apply.error


def test_a_failing_unit_of_work_ends_its_span_in_error(receiver: SpanReceiver) -> None:
    @traced("sits.test.traced", task_type="analyse")
    def broken() -> None:
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        broken()
    with span("sits.test.span", task_type="scrape", queue_depth=7, attributes={"k": "v"}):
        pass
    (failed,) = receiver.named("sits.test.traced")
    assert failed.error and failed.attributes[TASK_TYPE] == "analyse"
    (ok,) = receiver.named("sits.test.span")
    assert not ok.error
    assert ok.attributes == {TASK_TYPE: "scrape", QUEUE_DEPTH: 7, "k": "v"}
