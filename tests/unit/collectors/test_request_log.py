"""Request-log importer: formats, timestamp forms, success rule, rejections, real traces."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sits_observe.collectors.inference.request_log import read_request_log
from sits_observe.domain.tables import REQUESTS
from sits_observe.errors import CollectorError, ConfigError, ParseError

NOW = datetime(2026, 5, 4, 3, 2, 1)


def read(path: Path, **kwargs: object) -> tuple[pa.Table, dict[str, int]]:
    options: dict[str, object] = {"model_column": "model", "latency_column": "latency", "now": NOW}
    options.update(kwargs)
    result = read_request_log(path, **options)  # type: ignore[arg-type]
    return result.tables[REQUESTS.name], dict(result.dropped)


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


# -- formats and timestamp forms ----------------------------------------------------------

TS_CASES = [
    ("2024-11-15 16:57:50", datetime(2024, 11, 15, 16, 57, 50)),
    ("2024-11-15T16:57:50.250", datetime(2024, 11, 15, 16, 57, 50, 250000)),
    ("2024-11-15T16:57:50Z", datetime(2024, 11, 15, 16, 57, 50)),
    ("2024-11-15T18:57:50.5+02:00", datetime(2024, 11, 15, 16, 57, 50, 500000)),
    ("2024-11-15 11:57:50-0500", datetime(2024, 11, 15, 16, 57, 50)),
    ("2023-11-16 18:15:46.6805900", datetime(2023, 11, 16, 18, 15, 46, 680590)),  # Azure form
    ("2024-11-15T16:57", datetime(2024, 11, 15, 16, 57)),
    ("2024-11-15", datetime(2024, 11, 15)),
    ("1731689870", datetime(2024, 11, 15, 16, 57, 50)),  # epoch seconds
    ("1731689870.25", datetime(2024, 11, 15, 16, 57, 50, 250000)),
    ("1731689870250", datetime(2024, 11, 15, 16, 57, 50, 250000)),  # epoch milliseconds
]


@pytest.mark.parametrize(("text", "expected"), TS_CASES)
def test_csv_timestamp_forms(tmp_path: Path, text: str, expected: datetime) -> None:
    path = write(tmp_path, "log.csv", f'model,latency,ts\nm,1.5,"{text}"\n')
    table, dropped = read(path, timestamp_column="ts")
    assert dropped == {}
    assert table.column("ts").to_pylist() == [expected]


def test_every_form_mixed_in_one_column(tmp_path: Path) -> None:
    """Each row is parsed by whichever form fits it, whatever the majority form is."""
    cases = [*TS_CASES, *TS_CASES[:3] * 40]  # the sniffed majority: the first three forms
    text = "".join(f'm,1,"{ts}"\n' for ts, _ in cases)
    path = write(tmp_path, "mixed.csv", "model,latency,ts\n" + text + "m,1,not a time\n")
    table, dropped = read(path, timestamp_column="ts")
    assert table.column("ts").to_pylist() == [expected for _, expected in cases]
    assert dropped == {"unparseable timestamp": 1}


def test_jsonl_with_numeric_and_text_timestamps(tmp_path: Path) -> None:
    rows = [
        {"model": "a", "latency": 0.5, "ts": 1731689870},
        {"model": "a", "latency": 1.0, "ts": 1731689870250},
        {"model": "b", "latency": "2.5", "ts": "2024-11-15T16:57:50Z"},
    ]
    path = write(tmp_path, "log.jsonl", "".join(json.dumps(r) + "\n" for r in rows))
    table, dropped = read(path, timestamp_column="ts")
    assert dropped == {}
    assert table.column("latency_s").to_pylist() == [0.5, 1.0, 2.5]
    assert table.column("ts").to_pylist() == [
        datetime(2024, 11, 15, 16, 57, 50),
        datetime(2024, 11, 15, 16, 57, 50, 250000),
        datetime(2024, 11, 15, 16, 57, 50),
    ]


def test_parquet_with_zoned_and_naive_datetimes(tmp_path: Path) -> None:
    plus2 = timezone(timedelta(hours=2))
    zoned = pl.DataFrame(
        {
            "model": ["a", "b"],
            "latency": [120.0, 80.0],
            "ts": [
                datetime(2024, 1, 1, 2, 0, tzinfo=plus2),
                datetime(2024, 1, 1, 3, 0, tzinfo=plus2),
            ],
        }
    )
    zoned.write_parquet(tmp_path / "zoned.parquet")
    table, _ = read(tmp_path / "zoned.parquet", timestamp_column="ts", latency_unit="ms")
    assert table.column("ts").to_pylist() == [
        datetime(2024, 1, 1, 0, 0),
        datetime(2024, 1, 1, 1, 0),
    ]
    assert table.column("latency_s").to_pylist() == [0.12, 0.08]
    naive = zoned.with_columns(
        ts=pl.Series([datetime(2024, 1, 1, 2, 0), datetime(2024, 1, 1, 3, 0)])
    )
    naive.write_parquet(tmp_path / "naive.parquet")
    table, _ = read(tmp_path / "naive.parquet", timestamp_column="ts")
    assert table.column("ts").to_pylist() == [
        datetime(2024, 1, 1, 2, 0),
        datetime(2024, 1, 1, 3, 0),
    ]


def test_epoch_seconds_vs_milliseconds_boundary(tmp_path: Path) -> None:
    """Below 1e11 is seconds, from 1e11 milliseconds, from 1e14 rejected."""
    path = write(
        tmp_path,
        "log.csv",
        "model,latency,ts\nm,1,99999999999\nm,1,100000000000\nm,1,99999999999999\nm,1,1e14\n",
    )
    table, dropped = read(path, timestamp_column="ts")
    epoch = datetime(1970, 1, 1)
    assert table.column("ts").to_pylist() == [
        epoch + timedelta(seconds=99_999_999_999),
        epoch + timedelta(milliseconds=100_000_000_000),
        epoch + timedelta(milliseconds=99_999_999_999_999),
    ]
    assert dropped == {"epoch timestamp out of range": 1}


def test_explicit_format_overrides_the_extension(tmp_path: Path) -> None:
    path = write(tmp_path, "log.txt", '{"model": "m", "latency": 1}\n')
    with pytest.raises(ConfigError, match=r"\.txt"):
        read(path)
    table, _ = read(path, file_format="jsonl")
    assert table.num_rows == 1


def test_no_timestamp_column_stamps_import_time(tmp_path: Path) -> None:
    path = write(tmp_path, "log.csv", "model,latency\na,1\nb,2\n")
    table, _ = read(path)
    assert table.column("ts").to_pylist() == [NOW, NOW]
    zoned_now = datetime(2026, 5, 4, 5, 2, 1, tzinfo=timezone(timedelta(hours=2)))
    table, _ = read(path, now=zoned_now)
    assert table.column("ts").to_pylist() == [NOW, NOW]


def test_arrival_timestamps_become_completion_times(tmp_path: Path) -> None:
    path = write(tmp_path, "log.csv", "model,latency,ts\nm,1500,2024-01-01 00:00:00\n")
    table, _ = read(path, timestamp_column="ts", latency_unit="ms", timestamp_marks="arrival")
    assert table.column("ts").to_pylist() == [datetime(2024, 1, 1, 0, 0, 1, 500000)]


# -- rejections ---------------------------------------------------------------------------


def test_bad_rows_are_rejected_and_counted_by_first_reason(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "log.csv",
        "model,latency,ts\n"
        "ok,1.0,2024-01-01 00:00:00\n"
        ",1.0,2024-01-01 00:00:00\n"  # missing model
        "m,,2024-01-01 00:00:00\n"  # missing latency
        "m,  ,2024-01-01 00:00:00\n"  # blank latency
        "m,fast,2024-01-01 00:00:00\n"  # non-numeric
        "m,NaN,2024-01-01 00:00:00\n"
        "m,inf,2024-01-01 00:00:00\n"
        "m,-0.5,2024-01-01 00:00:00\n"
        "m,1.0,\n"  # missing timestamp
        "m,1.0,yesterday\n"
        "m,1.0,-5\n"
        ",NaN,yesterday\n",  # counted once, under the first reason
    )
    table, dropped = read(path, timestamp_column="ts")
    assert table.column("model").to_pylist() == ["ok"]
    assert dropped == {
        "missing model": 2,
        "missing latency": 2,
        "non-numeric latency": 1,
        "NaN latency": 1,
        "infinite latency": 1,
        "negative latency": 1,
        "missing timestamp": 1,
        "unparseable timestamp": 1,
        "epoch timestamp out of range": 1,
    }


def test_invalid_optional_values_are_nulled_and_counted(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "log.csv",
        "model,latency,ttft,itl,pin,pout\nm,1,0.2,0.01,100,20\nm,1,-0.2,nan,1.5,x\nm,1,,,,\n",
    )
    table, dropped = read(
        path,
        ttft_column="ttft",
        inter_token_column="itl",
        prompt_tokens_column="pin",
        output_tokens_column="pout",
    )
    assert table.column("ttft_s").to_pylist() == [0.2, None, None]
    assert table.column("inter_token_s").to_pylist() == [0.01, None, None]
    assert table.column("prompt_tokens").to_pylist() == [100, None, None]
    assert table.column("output_tokens").to_pylist() == [20, None, None]
    assert dropped == {
        "ttft: invalid value stored as NULL": 1,
        "itl: invalid value stored as NULL": 1,
        "pin: invalid value stored as NULL": 1,
        "pout: invalid value stored as NULL": 1,
    }


def test_unknown_columns_list_the_files_columns(tmp_path: Path) -> None:
    path = write(tmp_path, "log.csv", "service,duration_ms\nm,1\n")
    with pytest.raises(ConfigError) as info:
        read(path, latency_column="duration_ms")
    message = str(info.value)
    assert "'model'" in message
    assert "service, duration_ms" in message


def test_missing_file_and_malformed_jsonl(tmp_path: Path) -> None:
    with pytest.raises(CollectorError, match="does not exist"):
        read(tmp_path / "nope.csv")
    path = write(tmp_path, "bad.jsonl", '{"model": "m", "latency": 1}\n{"model": \n')
    with pytest.raises(ParseError, match=r"bad\.jsonl"):
        read(path)


def test_ms_unit_applies_to_latency_ttft_and_inter_token(tmp_path: Path) -> None:
    path = write(tmp_path, "log.csv", "model,latency,ttft,itl\nm,2500,300,20\n")
    table, _ = read(path, latency_unit="ms", ttft_column="ttft", inter_token_column="itl")
    assert table.column("latency_s").to_pylist() == [2.5]
    assert table.column("ttft_s").to_pylist() == [0.3]
    assert table.column("inter_token_s").to_pylist() == [0.02]


# -- success rule -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "ok"),
    [
        ("", True),
        ("200", True),
        ("204", True),
        ("OK", True),
        ("Success", True),
        ("SUCCEED", True),
        ("true", True),
        ("completed", True),
        ("429", False),
        ("500", False),
        ("-100", False),
        ("error", False),
        ("FAILED", False),
        ("PENDING", False),
        ("false", False),
        ("0", False),
    ],
)
def test_success_rule(tmp_path: Path, status: str, ok: bool) -> None:
    path = write(tmp_path, "log.csv", f'model,latency,status\nm,1,"{status}"\n')
    table, _ = read(path, status_column="status")
    assert table.column("ok").to_pylist() == [ok]
    assert table.column("status").to_pylist() == [status or None]


def test_numeric_and_boolean_status_in_parquet(tmp_path: Path) -> None:
    pl.DataFrame(
        {"model": ["m"] * 3, "latency": [1.0] * 3, "code": [200.0, 503.0, None]}
    ).write_parquet(tmp_path / "a.parquet")
    table, _ = read(tmp_path / "a.parquet", status_column="code")
    assert table.column("ok").to_pylist() == [True, False, True]
    pl.DataFrame({"model": ["m"] * 2, "latency": [1.0] * 2, "done": [True, False]}).write_parquet(
        tmp_path / "b.parquet"
    )
    table, _ = read(tmp_path / "b.parquet", status_column="done")
    assert table.column("ok").to_pylist() == [True, False]


# -- property: what is written is what is read --------------------------------------------


@settings(max_examples=50, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.lists(
        st.tuples(
            st.floats(min_value=0, max_value=1e6, allow_nan=False),
            st.integers(min_value=0, max_value=4_000_000_000),
        ),
        min_size=1,
        max_size=50,
    )
)
def test_latencies_and_epoch_seconds_round_trip_exactly(
    tmp_path: Path, rows: list[tuple[float, int]]
) -> None:
    path = tmp_path / "rt.csv"
    path.write_text("model,latency,ts\n" + "".join(f"m,{lat!r},{ts}\n" for lat, ts in rows))
    table, dropped = read(path, timestamp_column="ts")
    assert dropped == {}
    assert table.column("latency_s").to_pylist() == [lat for lat, _ in rows]
    epoch = datetime(1970, 1, 1)
    assert table.column("ts").to_pylist() == [epoch + timedelta(seconds=ts) for _, ts in rows]


# -- real traces (../shared/data) ---------------------------------------------------------


@pytest.mark.shared_data
def test_llmperf_flat_csv(shared_data: Path) -> None:
    """traces/llmperf-leaderboard/llmperf_requests_flat_7b.csv: 5 x 150 requests, 130 of
    lepton's failed with 429; stored latencies reproduce LLMPerf's own P95 summaries exactly."""
    folder = shared_data / "traces" / "llmperf-leaderboard"
    table, dropped = read(
        folder / "llmperf_requests_flat_7b.csv",
        model_column="provider",
        latency_column="end_to_end_latency_s",
        status_column="error_code",
        ttft_column="ttft_s",
        inter_token_column="inter_token_latency_s",
        prompt_tokens_column="number_input_tokens",
        output_tokens_column="number_output_tokens",
    )
    assert dropped == {}
    assert table.num_rows == 750
    frame = pl.from_arrow(table)
    assert isinstance(frame, pl.DataFrame)
    failed = frame.filter(~pl.col("ok"))
    assert failed.height == 130
    assert set(failed["model"]) == {"lepton"}
    assert set(failed["status"]) == {"429"}
    first = frame.row(0, named=True)
    assert first["model"] == "anyscale"
    assert first["latency_s"] == 2.9139140899999916
    assert first["ttft_s"] == 0.42822809399999073
    assert first["inter_token_s"] == 0.018749778569536718
    assert (first["prompt_tokens"], first["output_tokens"]) == (550, 151)
    assert first["source"] == "llmperf_requests_flat_7b.csv"
    for provider in ("anyscale", "fireworks", "replicate", "together"):
        summary = json.loads((folder / "summary" / f"{provider}_7b.json").read_text())
        latencies = frame.filter(pl.col("ok") & (pl.col("model") == provider))["latency_s"]
        p95 = float(np.percentile(latencies.to_numpy(), 95))
        assert p95 == pytest.approx(
            summary["results_end_to_end_latency_s_quantiles_p95"], rel=1e-12
        )


@pytest.mark.shared_data
def test_alibaba_genai_trace(shared_data: Path) -> None:
    """traces/alibaba-genai-v2026/lora_request_trace_first10000.csv: 10,000 requests; the 3
    PENDING rows have no checkpoint (missing model); 174 FAILED are stored with ok=false."""
    table, dropped = read(
        shared_data / "traces" / "alibaba-genai-v2026" / "lora_request_trace_first10000.csv",
        model_column="checkpoint_model_version_id",
        latency_column="exec_time_seconds",
        timestamp_column="gmt_create",
        status_column="predict_status",
        timestamp_marks="arrival",
    )
    assert dropped == {"missing model": 3}
    assert table.num_rows == 9997
    frame = pl.from_arrow(table)
    assert isinstance(frame, pl.DataFrame)
    assert frame.filter(~pl.col("ok")).height == 174
    assert set(frame.filter(~pl.col("ok"))["status"]) == {"FAILED"}
    first = frame.row(0, named=True)
    assert first["model"] == "M0000"
    assert first["latency_s"] == 32.0
    # arrival 2024-11-15 16:57:50 + 32 s of execution
    assert first["ts"] == datetime(2024, 11, 15, 16, 58, 22)


@pytest.mark.shared_data
def test_azure_arrivals_have_no_latency_column(shared_data: Path) -> None:
    """traces/azure-llm-2023: arrivals and token counts only; asking for latency must say so."""
    path = shared_data / "traces" / "azure-llm-2023" / "AzureLLMInferenceTrace_conv_first10000.csv"
    with pytest.raises(ConfigError) as info:
        read(path, model_column="ContextTokens", latency_column="latency_s")
    assert "'latency_s'" in str(info.value)
    assert "TIMESTAMP, ContextTokens, GeneratedTokens" in str(info.value)


def test_result_is_conformed_to_the_requests_schema(tmp_path: Path) -> None:
    path = write(tmp_path, "log.csv", "model,latency\nm,1\n")
    table, _ = read(path, source="gateway")
    assert table.schema == REQUESTS.schema
    row = table.to_pylist()[0]
    assert (row["ok"], row["status"], row["source"]) == (True, None, "gateway")


def test_header_only_file_gives_an_empty_table(tmp_path: Path) -> None:
    table, dropped = read(write(tmp_path, "log.csv", "model,latency\n"))
    assert table.num_rows == 0
    assert table.schema == REQUESTS.schema
    assert dropped == {}
