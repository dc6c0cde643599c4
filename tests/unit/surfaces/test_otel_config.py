"""Where spans go: ``--otlp-endpoint`` and the standard OTEL_* variables."""

from __future__ import annotations

import pytest

from sits_observe.errors import ConfigError
from sits_observe.surfaces.tracing import configure_tracing, traces_endpoint


@pytest.mark.parametrize(
    ("flag", "env", "expected"),
    [
        (None, {}, None),
        ("http://collector:4318", {}, "http://collector:4318/v1/traces"),
        ("http://collector:4318/", {}, "http://collector:4318/v1/traces"),
        ("https://c:4318/custom/path", {}, "https://c:4318/custom/path"),
        (None, {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318/"}, "http://c:4318/v1/traces"),
        (
            None,
            {
                "OTEL_EXPORTER_OTLP_ENDPOINT": "http://base:4318",
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://t:9/x",
            },
            "http://t:9/x",
        ),
        (
            "http://flag:1",
            {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://t:9/x"},
            "http://flag:1/v1/traces",
        ),
        ("http://flag:1", {"OTEL_SDK_DISABLED": "true"}, None),
    ],
)
def test_endpoint_resolution(flag: str | None, env: dict[str, str], expected: str | None) -> None:
    assert traces_endpoint(flag, env) == expected


@pytest.mark.parametrize("bad", ["collector:4318", "grpc://c:4317", "http://"])
def test_a_bad_endpoint_names_the_flag(bad: str) -> None:
    with pytest.raises(ConfigError, match="--otlp-endpoint"):
        traces_endpoint(bad, {})


def test_no_endpoint_installs_nothing() -> None:
    assert configure_tracing("sits-observe-test", None, env={}) is None
