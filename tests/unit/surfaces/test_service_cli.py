"""The ``serve`` and ``agent`` commands refuse bad configuration before starting anything."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from sits_observe.surfaces.cli import agent, serve


@pytest.fixture
def app() -> typer.Typer:
    app = typer.Typer()
    serve.register(app)
    agent.register(app)
    return app


def run(app: typer.Typer, *args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args), env={"SITS_TOKEN": "", **(env or {})})
    return result.exit_code, result.output


def test_serve_refuses_to_start_without_a_token(app: typer.Typer, tmp_path: Path) -> None:
    code, output = run(app, "serve", "--db", str(tmp_path / "s.duckdb"))
    assert code == 2 and "no bearer token" in output
    assert not (tmp_path / "s.duckdb").exists()


def test_serve_names_the_flag_that_is_out_of_bounds(app: typer.Typer, tmp_path: Path) -> None:
    code, output = run(
        app,
        "serve",
        "--db",
        str(tmp_path / "s.duckdb"),
        "--max-body-bytes",
        "10",
        env={"SITS_TOKEN": "abc"},
    )
    assert code == 2 and "--max-body-bytes" in output


def test_agent_needs_a_collector_a_token_and_valid_bounds(app: typer.Typer, tmp_path: Path) -> None:
    base = ["agent", "--service", "http://127.0.0.1:1", "--node", "n1"]
    base += ["--spool-dir", str(tmp_path / "spool")]
    code, output = run(app, *base, "--cgroup-root", str(tmp_path))
    assert code == 2 and "no bearer token" in output
    code, output = run(app, *base, "--no-nvml", env={"SITS_TOKEN": "abc"})
    assert code == 2 and "no collectors" in output
    code, output = run(
        app, *base, "--cgroup-root", str(tmp_path), "--interval-s", "0", env={"SITS_TOKEN": "t"}
    )
    assert code == 2 and "--interval-s" in output


def test_agent_refuses_a_node_name_the_service_would_reject(
    app: typer.Typer, tmp_path: Path
) -> None:
    code, output = run(
        app,
        "agent",
        "--service",
        "http://127.0.0.1:1",
        "--node",
        "bad node",
        "--cgroup-root",
        str(tmp_path),
        "--spool-dir",
        str(tmp_path / "spool"),
        env={"SITS_TOKEN": "t"},
    )
    assert code == 2 and "--node" in output


def test_serve_passes_exporter_and_alerting_flags_to_the_service(
    app: typer.Typer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    captured: dict[str, Any] = {}
    monkeypatch.setattr(serve, "run_service", lambda settings, **kw: captured.update(kw))
    secret = tmp_path / "hmac.key"
    secret.write_text("a-long-enough-hmac-key\n", encoding="utf-8")
    code, output = run(
        app,
        "serve",
        "--db",
        str(tmp_path / "s.duckdb"),
        "--exporter-cache-s",
        "30",
        "--slo-ms",
        "2500",
        "--alert-webhook-url",
        "http://127.0.0.1:9/hook",
        "--alert-webhook-secret-file",
        str(secret),
        env={"SITS_TOKEN": "abc"},
    )
    assert code == 0, output
    exporter = captured["exporter"]
    alerting = captured["alerting"]
    assert exporter.cache_s == 30 and exporter.latency_slo_s == 2.5 and exporter.enabled
    assert exporter.window_s == 300  # untouched default
    assert alerting is not None and alerting.notify.webhook_urls == ("http://127.0.0.1:9/hook",)
    code, _ = run(
        app, "serve", "--db", str(tmp_path / "s.duckdb"), "--no-exporter", env={"SITS_TOKEN": "abc"}
    )
    assert code == 0 and not captured["exporter"].enabled
    assert captured["alerting"] is None  # no target: alerting off


def test_serve_names_an_out_of_bounds_exporter_flag(
    app: typer.Typer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(serve, "run_service", lambda settings, **kw: None)
    code, output = run(
        app,
        "serve",
        "--db",
        str(tmp_path / "s.duckdb"),
        "--exporter-window-s",
        "0",
        env={"SITS_TOKEN": "abc"},
    )
    assert code == 2 and "invalid exporter settings: --exporter-window-s: " in output, output
