"""Spans for the pipeline, through the OpenTelemetry *API* only (a no-op until configured).

Every layer may import this module: it depends on ``opentelemetry-api`` and nothing of
sits_observe, so it sits outside the layer contract like :mod:`sits_observe.errors`. The SDK,
the OTLP exporter and the resource (``service.name``) are set up by a composition root
(:mod:`sits_observe.surfaces.tracing`, called by ``serve`` and ``agent``); until then every
span here is the API's non-recording span, which costs a context switch and no allocation of
span data.

Each unit of pipeline work is one span whose name says what it is (``sits.scrape``,
``sits.ingest``, ``sits.analyse``, ``sits.plan``, ``sits.apply``) and which carries

- ``scheduler.task.type``: the kind of work, one of :data:`TASK_TYPES`;
- ``scheduler.task.queue.depth``: how much work waited behind it when that is known (batches
  in the agent's spool, decisions pending application).

An exception that leaves a span marks it ``ERROR`` and is recorded as a span event (the
API's default), then propagates unchanged: tracing never swallows or adds errors.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Literal, ParamSpec, TypeVar, cast

from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind
from opentelemetry.util.types import AttributeValue

#: Instrumentation scope of every sits_observe span.
TRACER_NAME = "sits_observe"
#: Attribute naming the kind of work a span covers.
TASK_TYPE = "scheduler.task.type"
#: Attribute giving the number of units of work queued behind the span's work.
QUEUE_DEPTH = "scheduler.task.queue.depth"

TaskType = Literal["scrape", "ingest", "analyse", "plan", "apply"]
TASK_TYPES: tuple[TaskType, ...] = ("scrape", "ingest", "analyse", "plan", "apply")

P = ParamSpec("P")
R = TypeVar("R")


def tracer() -> trace.Tracer:
    """The sits_observe tracer of the current global provider (a no-op one by default).

    Looked up on each call rather than kept at import time, so a provider installed later by
    the composition root is used and importing this module has no side effect.
    """
    return trace.get_tracer(TRACER_NAME)


@contextmanager
def span(
    name: str,
    *,
    task_type: TaskType | None = None,
    queue_depth: int | None = None,
    attributes: Mapping[str, AttributeValue] | None = None,
    kind: SpanKind = SpanKind.INTERNAL,
) -> Iterator[Span]:
    """Run the ``with`` body inside a span named ``name``, a child of the current one."""
    attrs: dict[str, AttributeValue] = dict(attributes or {})
    if task_type is not None:
        attrs[TASK_TYPE] = task_type
    if queue_depth is not None:
        attrs[QUEUE_DEPTH] = queue_depth
    with tracer().start_as_current_span(name, kind=kind, attributes=attrs) as current:
        yield current


def traced(
    name: str, *, task_type: TaskType | None = None
) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Decorate a function (or coroutine function) so each call runs in :func:`span`."""

    def decorate(fn: Callable[P, R]) -> Callable[P, R]:
        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def run_async(*args: P.args, **kwargs: P.kwargs) -> object:
                with span(name, task_type=task_type):
                    return await fn(*args, **kwargs)

            return cast(Callable[P, R], run_async)

        @functools.wraps(fn)
        def run(*args: P.args, **kwargs: P.kwargs) -> R:
            with span(name, task_type=task_type):
                return fn(*args, **kwargs)

        return run

    return decorate


def note(attributes: Mapping[str, AttributeValue]) -> None:
    """Set ``attributes`` on the current span (nothing happens outside a recording span)."""
    current = trace.get_current_span()
    if current.is_recording():
        current.set_attributes(attributes)


def note_queue_depth(depth: int) -> None:
    """Set ``scheduler.task.queue.depth`` on the current span."""
    current = trace.get_current_span()
    if current.is_recording():
        current.set_attribute(QUEUE_DEPTH, depth)
