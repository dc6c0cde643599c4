"""``sits-observe ingest requests``: files into a real DuckDB file, output, rejections, errors."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sits_observe.store import Store
from sits_observe.surfaces.cli.main import app


def invoke(*args: str) -> tuple[int, str]:
    outcome = CliRunner().invoke(app, ["ingest", "requests", *args])
    return outcome.exit_code, outcome.output


def test_small_log_with_rejections(tmp_path: Path) -> None:
    log = tmp_path / "gateway.jsonl"
    log.write_text(
        '{"svc": "chat", "ms": 1200, "at": "2026-01-02T03:04:05Z", "code": 200}\n'
        '{"svc": "chat", "ms": 900, "at": "2026-01-02T03:04:06+01:00", "code": 503}\n'
        '{"svc": "chat", "ms": -3, "at": "2026-01-02T03:04:07Z", "code": 200}\n'
        '{"svc": "chat", "ms": "slow", "at": "2026-01-02T03:04:08Z", "code": 200}\n'
        '{"svc": "chat", "at": "2026-01-02T03:04:09Z", "code": 200}\n'
    )
    db = tmp_path / "obs.duckdb"
    code, output = invoke(
        str(log), "--db", str(db), "--model-column", "svc", "--latency-column", "ms",
        "--latency-unit", "ms", "--timestamp-column", "at", "--status-column", "code",
    )  # fmt: skip
    assert code == 3, output  # stored, with three records rejected
    assert "failed requests stored with ok=false: 1" in output
    assert "first rejected record 3 (negative latency)" in output
    for reason in ("negative latency", "non-numeric latency", "missing latency"):
        assert reason in output
    with Store.open(db, read_only=True) as store:
        rows = store.query(
            "SELECT ts, model, latency_s, ok, status, source FROM requests ORDER BY ts"
        ).to_pylist()
        drops = store.query(
            "SELECT collector, reason, count FROM collector_drops ORDER BY reason"
        ).to_pylist()
    assert [(r["latency_s"], r["ok"], r["status"]) for r in rows] == [
        (0.9, False, "503"),  # 03:04:06+01:00 = 02:04:06 UTC
        (1.2, True, "200"),
    ]
    assert {r["source"] for r in rows} == {"gateway.jsonl"}
    assert [(d["reason"], d["count"]) for d in drops] == [
        ("missing latency", 1),
        ("negative latency", 1),
        ("non-numeric latency", 1),
    ]
    assert {d["collector"] for d in drops} == {"request_log"}


def test_reimporting_the_same_file_stores_nothing_new(tmp_path: Path) -> None:
    log = tmp_path / "a.csv"
    log.write_text("model,latency\nm,1\nm,2\n")
    db = tmp_path / "obs.duckdb"
    args = [str(log), "--db", str(db), "--model-column", "model", "--latency-column", "latency"]
    assert invoke(*args)[0] == 0
    code, output = invoke(*args)
    assert code == 0
    assert "already imported" in output
    with Store.open(db, read_only=True) as store:
        assert store.count("requests") == 2


def test_unknown_column_exits_2_and_lists_columns(tmp_path: Path) -> None:
    log = tmp_path / "a.csv"
    log.write_text("service,duration\nm,1\n")
    code, output = invoke(
        str(log), "--db", str(tmp_path / "x.duckdb"), "--model-column", "service",
        "--latency-column", "latency",
    )  # fmt: skip
    assert code == 2
    assert "service, duration" in " ".join(output.split())


@pytest.mark.shared_data
def test_llmperf_import_end_to_end(shared_data: Path, tmp_path: Path) -> None:
    """traces/llmperf-leaderboard/llmperf_requests_flat_7b.csv: 750 rows, 130 failures (429),
    no timestamp column (import time, said in the output)."""
    log = shared_data / "traces" / "llmperf-leaderboard" / "llmperf_requests_flat_7b.csv"
    db = tmp_path / "obs.duckdb"
    code, output = invoke(
        str(log), "--db", str(db), "--model-column", "provider",
        "--latency-column", "end_to_end_latency_s", "--status-column", "error_code",
        "--ttft-column", "ttft_s", "--output-tokens-column", "number_output_tokens",
    )  # fmt: skip
    assert code == 0, output
    assert "failed requests stored with ok=false: 130" in output
    assert "import time" in output
    assert "rejected: nothing" in output
    with Store.open(db, read_only=True) as store:
        assert store.count("requests") == 750
        per_model = store.query(
            "SELECT model, count(*) AS n, sum(CASE WHEN ok THEN 1 ELSE 0 END) AS ok_n "
            "FROM requests GROUP BY model ORDER BY model"
        ).to_pylist()
        p95 = store.scalar(
            "SELECT quantile_cont(latency_s, 0.95) FROM requests WHERE ok AND model = ?",
            ["anyscale"],
        )
    assert [(r["model"], r["n"], r["ok_n"]) for r in per_model] == [
        ("anyscale", 150, 150),
        ("fireworks", 150, 150),
        ("lepton", 150, 20),
        ("replicate", 150, 150),
        ("together", 150, 150),
    ]
    # LLMPerf's summary/anyscale_7b.json results_end_to_end_latency_s_quantiles_p95
    assert p95 == pytest.approx(3.193026782250011, rel=1e-12)


@pytest.mark.shared_data
def test_azure_arrivals_exit_2_naming_the_missing_latency(
    shared_data: Path, tmp_path: Path
) -> None:
    log = shared_data / "traces" / "azure-llm-2023" / "AzureLLMInferenceTrace_conv_first10000.csv"
    code, output = invoke(
        str(log), "--db", str(tmp_path / "x.duckdb"), "--model-column", "ContextTokens",
        "--latency-column", "latency_s", "--timestamp-column", "TIMESTAMP",
    )  # fmt: skip
    assert code == 2
    flat = " ".join(output.split())
    assert "'latency_s'" in flat
    assert "TIMESTAMP, ContextTokens, GeneratedTokens" in flat


def test_rows_dated_2100_or_before_2000_are_rejected_as_serve_rejects_them(
    tmp_path: Path,
) -> None:
    """The CLI stored rows dated 2100 that ``POST /api/v1/ingest`` drops. Both now run
    domain.ranges.screen_tables: ``ts:future`` past now + 300 s, ``ts:too_old`` before 2000,
    exit 3, and one collector_drops row per reason of collector ``ingest``, as serve stores
    them."""
    log = tmp_path / "dated.csv"
    log.write_text(
        "at,model,ms\n"
        "2100-01-01T00:00:00Z,m,120\n"
        "2026-01-01T00:00:00Z,m,100\n"
        "1990-01-01T00:00:00Z,m,90\n"
        "4102444800,m,80\n"  # epoch seconds of 2100-01-01
    )
    db = tmp_path / "obs.duckdb"
    code, output = invoke(
        str(log), "--db", str(db), "--model-column", "model", "--latency-column", "ms",
        "--latency-unit", "ms", "--timestamp-column", "at",
    )  # fmt: skip
    assert code == 3, output
    assert "requests.ts:future" in output and "requests.ts:too_old" in output
    with Store.open(db, read_only=True) as store:
        kept = store.query("SELECT ts FROM requests").column("ts").to_pylist()
        drops = store.query(
            "SELECT collector, reason, count FROM collector_drops ORDER BY reason"
        ).to_pylist()
    assert [t.year for t in kept] == [2026]
    assert [(d["collector"], d["reason"], d["count"]) for d in drops] == [
        ("ingest", "requests.ts:future", 2),
        ("ingest", "requests.ts:too_old", 1),
    ]


def test_a_log_dated_only_in_the_future_stores_nothing(tmp_path: Path) -> None:
    log = tmp_path / "future.csv"
    log.write_text("at,model,latency\n2100-01-01T00:00:00Z,m,1\n2100-01-02T00:00:00Z,m,2\n")
    db = tmp_path / "obs.duckdb"
    code, output = invoke(
        str(log), "--db", str(db), "--model-column", "model", "--latency-column", "latency",
        "--timestamp-column", "at",
    )  # fmt: skip
    assert code == 2, output
    assert "requests.ts:future: 2" in output
    assert not db.exists()


def test_max_future_skew_s_widens_the_window_like_serves_flag(tmp_path: Path) -> None:
    ahead = datetime.now(UTC) + timedelta(hours=1)
    log = tmp_path / "ahead.csv"
    log.write_text(f"at,model,latency\n{ahead:%Y-%m-%dT%H:%M:%SZ},m,1\n")
    flags = ["--model-column", "model", "--latency-column", "latency", "--timestamp-column", "at"]
    refused, output = invoke(str(log), "--db", str(tmp_path / "a.duckdb"), *flags)
    assert refused == 2, output
    stored, output = invoke(
        str(log), "--db", str(tmp_path / "b.duckdb"), *flags, "--max-future-skew-s", "7200"
    )
    assert stored == 0, output
