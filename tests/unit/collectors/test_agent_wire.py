"""The agent -> service wire format: round trips, and every defect is a ParseError."""

from __future__ import annotations

import struct
from datetime import datetime

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sits_observe.collectors.agent.wire import MAGIC, batch_rows, decode_batch, encode_batch
from sits_observe.domain.tables import conform, empty_table
from sits_observe.errors import ParseError


def sample_tables() -> dict[str, pa.Table]:
    gpu = conform(
        "gpu_samples",
        pa.table(
            {
                "ts": pa.array(
                    [datetime(2026, 1, 1, 0, 0, s) for s in range(3)], pa.timestamp("us")
                ),
                "node": ["n1", "n1", None],
                "gpu_uuid": ["GPU-a", "GPU-b", "GPU-c"],
                "fb_used_bytes": [1, None, 3],
                "gpu_util_ratio": [0.0, 0.5, None],
            }
        ),
    )
    drops = conform(
        "collector_drops",
        pa.table({"collector": ["dcgm"], "reason": ["sentinel"], "count": [4]}),
    )
    return {"gpu_samples": gpu, "collector_drops": drops, "requests": empty_table("requests")}


@pytest.mark.parametrize("compression", [None, "lz4", "zstd"])
def test_round_trip_keeps_tables_schemas_and_values(compression: str | None) -> None:
    tables = sample_tables()
    decoded = decode_batch(encode_batch(tables, compression=compression))
    assert list(decoded) == list(tables)
    for name, table in tables.items():
        assert decoded[name].schema.equals(table.schema), name
        assert decoded[name].equals(table), name
    assert batch_rows(decoded) == 4


def test_body_layout_is_magic_then_named_frames() -> None:
    body = encode_batch({"collector_drops": sample_tables()["collector_drops"]})
    assert body.startswith(MAGIC)
    (name_len,) = struct.unpack_from(">H", body, len(MAGIC))
    name = body[len(MAGIC) + 2 : len(MAGIC) + 2 + name_len]
    assert name == b"collector_drops"
    (stream_len,) = struct.unpack_from(">Q", body, len(MAGIC) + 2 + name_len)
    assert len(body) == len(MAGIC) + 2 + name_len + 8 + stream_len


def test_magic_alone_is_an_empty_batch() -> None:
    assert decode_batch(MAGIC) == {}
    assert encode_batch({}) == MAGIC


@pytest.mark.parametrize("body", [b"", b"SITS", b'{"rows": []}', b"XITSARW1"])
def test_wrong_magic_is_refused(body: bytes) -> None:
    with pytest.raises(ParseError, match="SITSARW1"):
        decode_batch(body)


def test_every_truncation_fails_or_yields_a_prefix_of_the_tables() -> None:
    """A prefix that ends exactly on a frame boundary is a smaller valid batch; any other
    prefix must be refused, never half-read."""
    tables = sample_tables()
    body = encode_batch(tables)
    names = list(tables)
    valid_prefixes = 0
    for cut in range(len(MAGIC), len(body)):
        try:
            decoded = decode_batch(body[:cut])
        except ParseError:
            continue
        valid_prefixes += 1
        assert list(decoded) == names[: len(decoded)]
        for name, table in decoded.items():
            assert table.equals(tables[name])
    assert valid_prefixes == len(names)  # the magic alone, then after frames 1 and 2


def test_duplicate_table_in_one_body_is_refused() -> None:
    one = encode_batch({"collector_drops": sample_tables()["collector_drops"]})
    with pytest.raises(ParseError, match="twice"):
        decode_batch(one + one[len(MAGIC) :])


def test_oversized_lengths_are_refused_without_reading_past_the_body() -> None:
    body = MAGIC + struct.pack(">H", 3) + b"abc" + struct.pack(">Q", 2**63)
    with pytest.raises(ParseError, match="claims"):
        decode_batch(body)
    with pytest.raises(ParseError, match="table-name length"):
        decode_batch(MAGIC + struct.pack(">H", 0))


def test_encode_refuses_bad_table_names() -> None:
    with pytest.raises(ValueError, match="table name"):
        encode_batch({"": empty_table("requests")})


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=400))
def test_arbitrary_bytes_after_magic_only_ever_raise_parse_error(tail: bytes) -> None:
    try:
        tables = decode_batch(MAGIC + tail)
    except ParseError:
        return
    for table in tables.values():
        table.validate(full=True)


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_corrupted_stream_bytes_only_ever_raise_parse_error(data: st.DataObject) -> None:
    body = bytearray(encode_batch(sample_tables()))
    for _ in range(data.draw(st.integers(1, 4))):
        pos = data.draw(st.integers(len(MAGIC), len(body) - 1))
        body[pos] = data.draw(st.integers(0, 255))
    try:
        tables = decode_batch(bytes(body))
    except ParseError:
        return
    for table in tables.values():
        table.validate(full=True)
