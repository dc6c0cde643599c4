"""Export the pipeline's spans over OTLP/HTTP: the SDK set-up the composition roots call.

:mod:`sits_observe.tracing` creates spans through the OpenTelemetry API; they are dropped
until :func:`configure_tracing` installs an SDK ``TracerProvider`` with a
``BatchSpanProcessor`` feeding an ``OTLPSpanExporter`` (protobuf over HTTP). ``serve`` and
``agent`` call it with their ``--otlp-endpoint`` flag; without the flag the standard
variables are read:

- ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``: the full traces URL, used as given;
- ``OTEL_EXPORTER_OTLP_ENDPOINT``: a base URL, ``/v1/traces`` is appended;
- ``OTEL_SDK_DISABLED=true``: no export whatever else is set.

With no endpoint at all nothing is installed and the SDK and exporter are never imported
(the node agent stays small). The resource carries ``service.name`` (``sits-observe-serve``
or ``sits-observe-agent``; ``OTEL_SERVICE_NAME`` overrides it) plus
``OTEL_RESOURCE_ATTRIBUTES``; headers (``OTEL_EXPORTER_OTLP_HEADERS``), compression and TLS
variables are honoured by the exporter itself. The SDK flushes the batch queue at process
exit; :func:`configure_tracing` returns the provider for callers that shut it down earlier.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field

from sits_observe.errors import ConfigError

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider

log = logging.getLogger(__name__)

SERVE_SERVICE_NAME = "sits-observe-serve"
AGENT_SERVICE_NAME = "sits-observe-agent"
TRACES_PATH = "/v1/traces"

ENV_TRACES_ENDPOINT = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
ENV_ENDPOINT = "OTEL_EXPORTER_OTLP_ENDPOINT"
ENV_DISABLED = "OTEL_SDK_DISABLED"
ENV_SERVICE_NAME = "OTEL_SERVICE_NAME"

OTLP_ENDPOINT_HELP = (
    "export the pipeline's spans over OTLP/HTTP to this collector URL (a base URL gets "
    f"{TRACES_PATH} appended); default ${ENV_TRACES_ENDPOINT} or ${ENV_ENDPOINT}, else no export"
)


class TracingSettings(BaseModel):
    """How spans are batched and exported (defaults are the SDK's)."""

    model_config = ConfigDict(frozen=True)

    schedule_delay_s: float = Field(
        5.0, gt=0, le=300, description="seconds between exports of the span queue"
    )
    export_timeout_s: float = Field(
        10.0, gt=0, le=300, description="seconds one export request may take"
    )
    max_queue_spans: int = Field(
        2048, ge=1, le=1_000_000, description="spans kept while waiting; more are dropped"
    )
    max_export_batch_spans: int = Field(
        512, ge=1, le=100_000, description="most spans in one export request"
    )


def traces_endpoint(flag: str | None, env: Mapping[str, str] | None = None) -> str | None:
    """The traces URL to export to, or None for no export (see the module docstring)."""
    env = os.environ if env is None else env
    if env.get(ENV_DISABLED, "").strip().lower() == "true":
        return None
    if flag:
        return _checked(flag, "--otlp-endpoint", append_path=True)
    if env.get(ENV_TRACES_ENDPOINT, "").strip():
        return _checked(env[ENV_TRACES_ENDPOINT].strip(), ENV_TRACES_ENDPOINT, append_path=False)
    if env.get(ENV_ENDPOINT, "").strip():
        base = env[ENV_ENDPOINT].strip().rstrip("/")
        return _checked(base + TRACES_PATH, ENV_ENDPOINT, append_path=False)
    return None


def _checked(url: str, source: str, *, append_path: bool) -> str:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ConfigError(
            f"{source} {url!r} is not an http(s) URL; give e.g. http://otel-collector:4318"
        )
    if append_path and parts.path in ("", "/"):
        return url.rstrip("/") + TRACES_PATH
    return url


def configure_tracing(
    service_name: str,
    otlp_endpoint: str | None,
    *,
    attributes: Mapping[str, str] | None = None,
    settings: TracingSettings | None = None,
    env: Mapping[str, str] | None = None,
) -> TracerProvider | None:
    """Install the global SDK provider exporting to the resolved endpoint; None when off.

    Call once per process, from the composition root. Raises :class:`ConfigError` for an
    endpoint that is not an http(s) URL.
    """
    env = os.environ if env is None else env
    endpoint = traces_endpoint(otlp_endpoint, env)
    if endpoint is None:
        return None
    settings = settings or TracingSettings()
    from opentelemetry import trace
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    resource_attributes = dict(attributes or {})
    if not env.get(ENV_SERVICE_NAME, "").strip():
        resource_attributes["service.name"] = service_name
    # Resource.create also merges OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME.
    provider = TracerProvider(resource=Resource.create(resource_attributes))
    exporter = OTLPSpanExporter(endpoint=endpoint, timeout=settings.export_timeout_s)
    provider.add_span_processor(
        BatchSpanProcessor(
            exporter,
            max_queue_size=settings.max_queue_spans,
            schedule_delay_millis=settings.schedule_delay_s * 1000.0,
            max_export_batch_size=min(settings.max_export_batch_spans, settings.max_queue_spans),
            export_timeout_millis=settings.export_timeout_s * 1000.0,
        )
    )
    trace.set_tracer_provider(provider)
    log.info("exporting spans of %s to %s", service_name, endpoint)
    return provider
