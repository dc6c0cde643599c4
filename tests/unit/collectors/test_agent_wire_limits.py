"""Decode limits: what a batch costs once decoded is read from its Arrow headers first.

Each hostile shape here is a few kilobytes on the wire and hundreds of megabytes or more once
decoded; the limits refuse it before Arrow allocates a byte of it (``pa.total_allocated_bytes``
of the default pool does not move), and a real agent batch passes.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyarrow import ipc

from sits_observe.collectors.agent.wire import (
    MAGIC,
    DecodeLimits,
    decode_batch,
    encode_batch,
)
from sits_observe.collectors.agent.wire_size import dictionary_expansion, stream_size
from sits_observe.domain.tables import conform
from sits_observe.errors import InputTooLarge, ParseError

LIMITS = DecodeLimits(max_batch_rows=500_000, max_table_rows=250_000, max_decoded_bytes=2**27)
T0 = datetime(2026, 11, 1, 12, 0)


def stream(table: pa.Table, compression: str | None = None, chunk: int | None = None) -> bytes:
    sink = pa.BufferOutputStream()
    options = ipc.IpcWriteOptions(compression=compression)
    with ipc.new_stream(sink, table.schema, options=options) as writer:
        writer.write_table(table, max_chunksize=chunk)
    return bytes(sink.getvalue().to_pybytes())


def requests_table(n: int) -> pa.Table:
    ts = [T0 + timedelta(milliseconds=i) for i in range(n)]
    return conform(
        "requests",
        pa.table(
            {"ts": pa.array(ts, pa.timestamp("us")), "model": ["m"] * n, "latency_s": [1.0] * n}
        ),
    )


def refused(body: bytes, limit: str) -> InputTooLarge:
    before = pa.total_allocated_bytes()
    with pytest.raises(InputTooLarge) as caught:
        decode_batch(body, LIMITS)
    assert pa.total_allocated_bytes() - before < 1 << 20, "decoded before refusing"
    assert caught.value.limit == limit
    assert f"--{limit.replace('_', '-')}" in str(caught.value)
    return caught.value


@pytest.mark.parametrize("compression", [None, "lz4", "zstd"])
def test_the_headers_bound_what_decoding_allocates(compression: str | None) -> None:
    n = 20_000
    table = pa.table(
        {
            "i": pa.array(np.arange(n)),
            "f": pa.array(np.random.default_rng(1).random(n)),
            "s": pa.array([f"pod-{i}" for i in range(n)]),
            "d": pa.array(["llama", "mistral"] * (n // 2)).dictionary_encode(),
        }
    )
    data = stream(table, compression, chunk=3_000)
    size = stream_size(pa.py_buffer(data))
    decoded = ipc.open_stream(data).read_all()
    assert size.rows == n
    # Every buffer once decompressed (what Arrow allocates), plus 8 bytes per row and column.
    buffers = size.decoded_bytes - n * 4 * 8
    assert 0.99 * decoded.nbytes <= buffers <= 1.2 * decoded.nbytes
    assert stream_size(pa.py_buffer(data), min_columns=10).decoded_bytes == (
        size.decoded_bytes + n * 6 * 8
    )


def test_null_columns_declaring_ten_million_rows_are_refused_unread() -> None:
    assert len(stream(pa.table({"ts": pa.nulls(10_000_000)}))) < 400  # what was sent
    body = encode_batch({"requests": pa.table({"ts": pa.nulls(10_000_000)})})
    error = refused(body, "max_table_rows")
    assert error.value == 10_000_000 and error.allowed == 250_000


def test_rows_over_several_tables_add_up_to_the_batch_limit() -> None:
    tables = {
        name: pa.table({"ts": pa.nulls(200_000)})
        for name in ("requests", "gpu_samples", "container_samples")
    }
    refused(encode_batch(tables), "max_batch_rows")


def test_a_compression_bomb_is_refused_by_its_declared_size() -> None:
    body = encode_batch(
        {"requests": pa.table({"latency_s": np.zeros(240_000)})}, compression="zstd"
    )
    assert len(body) < 100_000
    small = DecodeLimits(max_batch_rows=10**9, max_table_rows=10**9, max_decoded_bytes=2**22)
    with pytest.raises(InputTooLarge) as caught:
        decode_batch(body, small)
    assert caught.value.limit == "max_decoded_bytes"
    assert caught.value.value >= 240_000 * 8


def test_dictionary_strings_count_at_their_expanded_size() -> None:
    n = 2_000
    huge = pa.DictionaryArray.from_arrays(pa.array([0] * n, pa.int8()), pa.array(["x" * 100_000]))
    table = pa.table({"model": huge})
    assert dictionary_expansion(ipc.open_stream(stream(table, "zstd")).read_all()) == n * 100_000
    body = encode_batch({"requests": table}, compression="zstd")
    assert len(body) < 10_000
    with pytest.raises(InputTooLarge, match="max-decoded-bytes"):
        decode_batch(body, LIMITS)


def test_an_agent_sized_batch_passes_and_round_trips() -> None:
    tables = {"requests": requests_table(6_000)}
    for compression in (None, "zstd"):
        decoded = decode_batch(encode_batch(tables, compression=compression), LIMITS)
        assert decoded["requests"].equals(tables["requests"])


def test_a_batch_at_the_row_limit_passes() -> None:
    exact = DecodeLimits(max_batch_rows=1_000, max_table_rows=1_000, max_decoded_bytes=2**27)
    assert decode_batch(encode_batch({"requests": requests_table(1_000)}), exact)
    with pytest.raises(InputTooLarge):
        decode_batch(encode_batch({"requests": requests_table(1_001)}), exact)


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_corrupted_headers_only_ever_raise_parse_error(data: st.DataObject) -> None:
    body = bytearray(encode_batch({"requests": requests_table(50)}, compression="zstd"))
    for _ in range(data.draw(st.integers(1, 4))):
        pos = data.draw(st.integers(len(MAGIC), len(body) - 1))
        body[pos] = data.draw(st.integers(0, 255))
    try:
        tables = decode_batch(bytes(body), LIMITS)
    except ParseError:
        return
    for table in tables.values():
        table.validate(full=True)
