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
The batch identity (``X-Sits-Batch-Id``) and the node (``X-Sits-Node``) travel as HTTP
headers, not in the body; the patterns below validate both on either side.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Mapping

import pyarrow as pa
from pyarrow import ipc

from sits_observe.errors import ParseError

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


def decode_batch(body: bytes) -> dict[str, pa.Table]:
    """Read a body written by :func:`encode_batch`; raises :class:`ParseError` on any defect."""
    view = memoryview(body)
    if bytes(view[: len(MAGIC)]) != MAGIC:
        raise ParseError(
            f"body does not start with {MAGIC!r}; expected a {CONTENT_TYPE} batch (see docs/api.md)"
        )
    pos = len(MAGIC)
    tables: dict[str, pa.Table] = {}
    while pos < len(view):
        if len(tables) >= MAX_TABLES:
            raise ParseError(f"more than {MAX_TABLES} tables in one batch")
        name, pos = _read_name(view, pos)
        if name in tables:
            raise ParseError(f"table {name!r} appears twice in one batch")
        stream, pos = _read_stream(view, pos, name)
        tables[name] = _read_table(stream, name)
    return tables


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
