"""The calibration constants, recomputed from the files they come from.

- ``shared/data/traces/splitwise-perf-model/perf_model_llama2-70b.csv``: :data:`H100` and
  :data:`A100` are its rows at tensor parallel 4, reduced by
  :func:`latency_profile_from_splitwise`;
- ``shared/data/traces/azure-llm-2023/AzureLLMInferenceTrace_conv_first10000.csv`` and
  ``shared/data/traces/mooncake-fast25/conversation_trace_first2000.jsonl``: the token quantile
  tables, and the log-normal fit kept for comparison.

Skip where the files are absent.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from sits_observe.analytics.serving.step_profiles import (
    AZURE_CONV,
    MOONCAKE_CONV,
    OUTPUT_TOKENS_LOG_MEAN,
    OUTPUT_TOKENS_LOG_SD,
    PROFILES,
    PROMPT_TOKENS_LOG_MEAN,
    PROMPT_TOKENS_LOG_SD,
    SPLITWISE_HARDWARE,
    SPLITWISE_TENSOR_PARALLEL,
    latency_profile_from_splitwise,
    token_quantiles,
)

pytestmark = pytest.mark.shared_data

TRACES = Path("traces")


@pytest.mark.parametrize("kind", sorted(PROFILES))
def test_latency_profiles_are_splitwise_s_tp4_rows(shared_data: Path, kind: str) -> None:
    rows = pl.read_csv(shared_data / TRACES / "splitwise-perf-model" / "perf_model_llama2-70b.csv")
    shipped = PROFILES[kind]
    derived = latency_profile_from_splitwise(
        rows, SPLITWISE_HARDWARE[kind], SPLITWISE_TENSOR_PARALLEL, shipped.name
    )
    assert derived.prefill_tokens == shipped.prefill_tokens
    assert derived.decode_batch == shipped.decode_batch
    # The constants are the derived medians to 0.1 ms (one rounds a mean of two medians).
    assert derived.prefill_ms == pytest.approx(shipped.prefill_ms, abs=0.11)
    assert derived.decode_step_ms == pytest.approx(shipped.decode_step_ms, abs=0.11)


def test_no_splitwise_rows_is_an_error_that_names_the_point(shared_data: Path) -> None:
    rows = pl.read_csv(shared_data / TRACES / "splitwise-perf-model" / "perf_model_llama2-70b.csv")
    with pytest.raises(ValueError, match="tensor parallel 3"):
        latency_profile_from_splitwise(rows, "h100-80gb", 3, "x")


def test_azure_tables_and_fit_are_the_trace_s(shared_data: Path) -> None:
    trace = pl.read_csv(
        shared_data / TRACES / "azure-llm-2023" / "AzureLLMInferenceTrace_conv_first10000.csv"
    )
    prompts = trace["ContextTokens"].to_numpy()
    outputs = trace["GeneratedTokens"].to_numpy()
    assert AZURE_CONV.prompt_tokens == token_quantiles(prompts)
    assert AZURE_CONV.output_tokens == token_quantiles(outputs)
    # The interpolated tables keep the trace's means within 2 %.
    assert AZURE_CONV.mean_output_tokens() == pytest.approx(outputs.mean(), rel=0.02)
    assert AZURE_CONV.prompt_grid().mean() == pytest.approx(prompts.mean(), rel=0.02)
    # The log-normal fit kept for comparison: the trace's log-mean and log-sd.
    assert np.log(prompts).mean() == pytest.approx(PROMPT_TOKENS_LOG_MEAN, abs=0.01)
    assert np.log(prompts).std() == pytest.approx(PROMPT_TOKENS_LOG_SD, abs=0.01)
    assert np.log(outputs).mean() == pytest.approx(OUTPUT_TOKENS_LOG_MEAN, abs=0.01)
    assert np.log(outputs).std() == pytest.approx(OUTPUT_TOKENS_LOG_SD, abs=0.01)


def test_mooncake_tables_are_the_trace_s(shared_data: Path) -> None:
    path = shared_data / TRACES / "mooncake-fast25" / "conversation_trace_first2000.jsonl"
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    assert MOONCAKE_CONV.prompt_tokens == token_quantiles(
        np.array([r["input_length"] for r in rows])
    )
    assert MOONCAKE_CONV.output_tokens == token_quantiles(
        np.array([r["output_length"] for r in rows])
    )
