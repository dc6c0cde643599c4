"""The agent -> service wire format: several Arrow tables in one HTTP body.

One module encodes and decodes, so the agent (which writes it), the spool (which keeps it on
disk) and the service (which reads it) cannot drift apart. The service, a higher layer, imports
this module; the agent never imports the service.

Body layout (all integers big-endian, unsigned)::

    body  := MAGIC frame*
    MAGIC := b"SITSARW1"                       8 bytes: format name and version 1
    frame := name_len:u16  name:utf-8[name_len]  stream_len:u64  stream[stream_len]

``stream`` is one complete Arrow IPC *stream* (schema message, record batches, end-of-stream
marker) holding one table; ``name`` is that table's name (see
:mod:`sits_observe.domain.tables`). A table appears at most once; frames are read in order
until the body ends. An empty body after the magic is a valid batch with no tables. Buffers
may be LZ4- or ZSTD-compressed (Arrow IPC body compression); the reader handles both.

Decoding never trusts a length: each one is checked against what is left of the body, and a
body that does not follow the layout exactly raises :class:`ParseError` naming the offset.
With :class:`DecodeLimits`, every stream's rows and decoded bytes are read from its message
headers (:mod:`.wire_size`) before anything is decoded, and a batch over a limit raises
:class:`InputTooLarge` naming it: a few hundred bytes on the wire cannot declare ten million
rows that decoding would then allocate.
The batch identity (``X-Sits-Batch-Id``) and the node (``X-Sits-Node``) travel as HTTP
headers, not in the body; the patterns below validate both on either side.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Mapping
from dataclasses import dataclass

import pyarrow as pa
from pyarrow import ipc

from sits_observe.collectors.agent.wire_size import (
    StreamSize,
    dictionary_expansion,
    stream_size,
)
from sits_observe.domain.tables import TABLES
from sits_observe.errors import InputTooLarge, ParseError

MAGIC = b"SITSARW1"
CONTENT_TYPE = "application/vnd.sits.arrow-batch"
INGEST_PATH = "/api/v1/ingest"
HEADER_BATCH_ID = "X-Sits-Batch-Id"
HEADER_NODE = "X-Sits-Node"

#: A batch id: 1-128 characters, letters, digits and ``. : -`` (a uuid4 hex fits).
BATCH_ID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9.:-]{0,127}\Z")
#: A node name: a Kubernetes node name (DNS subdomain, at most 253 characters), any case.
NODE_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,252}\Z")

#: Limits that keep a hostile body from costing more than its size.
MAX_TABLES = 64
MAX_NAME_BYTES = 64

_NAME_LEN = struct.Struct(">H")
_STREAM_LEN = struct.Struct(">Q")


@dataclass(frozen=True)
class DecodeLimits:
    """What one batch may cost once decoded; each field is named by the flag that sets it."""

    max_batch_rows: int
    max_table_rows: int
    max_decoded_bytes: int

    def check(self, name: str, table: StreamSize, batch: StreamSize) -> None:
        """Raise :class:`InputTooLarge` when table ``name`` or the batch so far (``batch``,
        ``table`` included) is over a limit."""
        over = [
            ("max_table_rows", f"table {name!r} declares", table.rows, self.max_table_rows, "rows"),
            ("max_batch_rows", "the batch declares", batch.rows, self.max_batch_rows, "rows"),
            (
                "max_decoded_bytes",
                "the batch decodes to",
                batch.decoded_bytes,
                self.max_decoded_bytes,
                "bytes",
            ),
        ]
        for limit, what, value, allowed, unit in over:
            if value > allowed:
                raise InputTooLarge(
                    f"{what} {value} {unit} (at table {name!r}); the limit is {allowed} "
                    f"(--{limit.replace('_', '-')}): send smaller batches",
                    limit=limit,
                    value=value,
                    allowed=allowed,
                )


def encode_batch(tables: Mapping[str, pa.Table], *, compression: str | None = None) -> bytes:
    """Frame ``tables`` (name -> Arrow table) as one body.

    ``compression`` is ``None``, ``"lz4"`` or ``"zstd"`` (Arrow IPC buffer compression).
    """
    if len(tables) > MAX_TABLES:
        raise ValueError(f"{len(tables)} tables in one batch; at most {MAX_TABLES} allowed")
    options = ipc.IpcWriteOptions(compression=compression)
    parts = [MAGIC]
    for name, table in tables.items():
        name_bytes = name.encode("utf-8")
        if not 0 < len(name_bytes) <= MAX_NAME_BYTES:
            raise ValueError(f"table name {name!r} must be 1-{MAX_NAME_BYTES} bytes of UTF-8")
        sink = pa.BufferOutputStream()
        with ipc.new_stream(sink, table.schema, options=options) as writer:
            writer.write_table(table)
        stream = sink.getvalue().to_pybytes()
        parts += [
            _NAME_LEN.pack(len(name_bytes)),
            name_bytes,
            _STREAM_LEN.pack(len(stream)),
            stream,
        ]
    return b"".join(parts)


def decode_batch(body: bytes, limits: DecodeLimits | None = None) -> dict[str, pa.Table]:
    """Read a body written by :func:`encode_batch`; raises :class:`ParseError` on any defect
    and, with ``limits``, :class:`InputTooLarge` before decoding a batch over one."""
    streams = _frames(body)
    if limits is None:
        return {name: _read_table(stream, name) for name, stream in streams.items()}
    sizes = {name: _stream_size(stream, name) for name, stream in streams.items()}
    batch = StreamSize()
    for name, size in sizes.items():
        batch += size
        limits.check(name, size, batch)
    tables = {name: _read_table(stream, name) for name, stream in streams.items()}
    # Dictionary-encoded strings grow when the store converts them: count that too.
    for name, table in tables.items():
        grown = StreamSize(0, dictionary_expansion(table))
        if grown.decoded_bytes:
            batch += grown
            limits.check(name, sizes[name] + grown, batch)
    return tables


def _frames(body: bytes) -> dict[str, memoryview]:
    """Every frame's table name and stream, in order."""
    view = memoryview(body)
    if bytes(view[: len(MAGIC)]) != MAGIC:
        raise ParseError(
            f"body does not start with {MAGIC!r}; expected a {CONTENT_TYPE} batch (see docs/api.md)"
        )
    pos = len(MAGIC)
    streams: dict[str, memoryview] = {}
    while pos < len(view):
        if len(streams) >= MAX_TABLES:
            raise ParseError(f"more than {MAX_TABLES} tables in one batch")
        name, pos = _read_name(view, pos)
        if name in streams:
            raise ParseError(f"table {name!r} appears twice in one batch")
        streams[name], pos = _read_stream(view, pos, name)
    return streams


def batch_rows(tables: Mapping[str, pa.Table]) -> int:
    """Rows over every table of a batch."""
    return sum(t.num_rows for t in tables.values())


def _read_name(view: memoryview, pos: int) -> tuple[str, int]:
    if pos + _NAME_LEN.size > len(view):
        raise ParseError(f"body truncated in a table-name length at byte {pos}")
    (length,) = _NAME_LEN.unpack_from(view, pos)
    pos += _NAME_LEN.size
    if not 0 < length <= MAX_NAME_BYTES:
        raise ParseError(f"table-name length {length} at byte {pos} not in 1-{MAX_NAME_BYTES}")
    if pos + length > len(view):
        raise ParseError(f"body truncated in a table name at byte {pos}")
    try:
        name = bytes(view[pos : pos + length]).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ParseError(f"table name at byte {pos} is not UTF-8: {exc}") from exc
    return name, pos + length


def _read_stream(view: memoryview, pos: int, name: str) -> tuple[memoryview, int]:
    if pos + _STREAM_LEN.size > len(view):
        raise ParseError(f"body truncated in the stream length of table {name!r} at byte {pos}")
    (length,) = _STREAM_LEN.unpack_from(view, pos)
    pos += _STREAM_LEN.size
    if length > len(view) - pos:
        raise ParseError(
            f"stream of table {name!r} claims {length} bytes but only {len(view) - pos} remain"
        )
    return view[pos : pos + length], pos + length


def _stream_size(stream: memoryview, name: str) -> StreamSize:
    table = TABLES.get(name)
    columns = 0 if table is None else len(table.schema)
    try:
        return stream_size(pa.py_buffer(stream), min_columns=columns)
    except ParseError as exc:
        raise ParseError(f"table {name!r} is not a valid Arrow IPC stream: {exc}") from exc


def _read_table(stream: memoryview, name: str) -> pa.Table:
    try:
        with ipc.open_stream(pa.py_buffer(stream)) as reader:
            table = reader.read_all()
        # Full validation checks every offset and length, so a crafted stream cannot make a
        # later reader (the store) touch memory outside its buffers.
        table.validate(full=True)
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise ParseError(f"table {name!r} is not a valid Arrow IPC stream: {exc}") from exc
    return table
