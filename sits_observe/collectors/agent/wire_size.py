"""How big an Arrow IPC stream is once decoded, read from its message headers alone.

A body's bytes on the wire say little about what decoding it costs: a record batch of
null-type columns declares any number of rows in a few hundred bytes, and a ZSTD-compressed
buffer of zeros grows a thousandfold. Before a stream is decoded, :func:`stream_size` walks
its messages (each a FlatBuffers header and a body, :mod:`pyarrow.ipc.MessageReader` hands
both out without copying or decompressing) and adds up, per record batch and dictionary
batch:

- ``rows``: the batch's declared length;
- ``decoded_bytes``: every buffer's size once decompressed (a compressed buffer starts with
  its uncompressed length, an int64; Arrow allocates exactly that and fails when the data
  does not match), plus 8 bytes per row and column, what the store's conversion of a column
  to its domain type (int64, float64, timestamp) may allocate; ``min_columns`` counts the
  domain table's columns that the stream lacks, which the store fills with NULLs.

A dictionary-encoded string column expands when it is converted; :func:`dictionary_expansion`
gives that size once the (already bounded) table is decoded, before it is converted.

Only the few FlatBuffers fields needed are read (format: ``format/Message.fbs`` of Apache
Arrow); every offset is checked against the header's size, so a crafted header raises
:class:`~sits_observe.errors.ParseError`, never reads outside it.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
from pyarrow import ipc

from sits_observe.errors import ParseError

#: ``MessageHeader`` union tags (Message.fbs).
_DICTIONARY_BATCH = 2
_RECORD_BATCH = 3
#: Bytes a compressed buffer's uncompressed length takes in front of its data.
_PREFIX = 8
#: Bytes per row and column the store's conversion of a column may allocate.
CONVERT_BYTES_PER_VALUE = 8

_U8 = struct.Struct("<B")
_U16 = struct.Struct("<H")
_I32 = struct.Struct("<i")
_U32 = struct.Struct("<I")
_I64 = struct.Struct("<q")
#: ``Buffer`` struct: offset and length in the body.
_BUFFER = struct.Struct("<qq")


@dataclass(frozen=True)
class StreamSize:
    """What decoding one stream costs: rows over its record batches, bytes once decoded."""

    rows: int = 0
    decoded_bytes: int = 0

    def __add__(self, other: StreamSize) -> StreamSize:
        return StreamSize(self.rows + other.rows, self.decoded_bytes + other.decoded_bytes)


def stream_size(stream: pa.Buffer, *, min_columns: int = 0) -> StreamSize:
    """Rows and decoded bytes of one IPC stream, from its headers, each record batch's rows
    counted over at least ``min_columns`` columns; raises :class:`ParseError` for a header
    that cannot be read (Arrow would refuse the stream too)."""
    rows = 0
    decoded = 0
    try:
        reader = ipc.MessageReader.open_stream(stream)
        while True:
            try:
                message = reader.read_next_message()
            except StopIteration:
                break
            if message is None:
                break
            kind = message.type
            if kind not in ("record batch", "dictionary"):
                continue
            flat = _Flat(message.metadata.to_pybytes())
            batch = _record_batch(flat, dictionary=kind == "dictionary")
            body = message.body
            decoded += _decoded(batch, memoryview(b"" if body is None else body))
            if kind == "record batch":
                rows += batch.length
                decoded += batch.length * max(batch.fields, min_columns) * CONVERT_BYTES_PER_VALUE
    except (pa.ArrowException, OSError, ValueError, struct.error) as exc:
        raise ParseError(f"cannot read its message headers: {exc}") from exc
    return StreamSize(rows, decoded)


def dictionary_expansion(table: pa.Table) -> int:
    """Bytes the table's dictionary-encoded string and binary columns take once converted
    to plain columns (the values each row points to); 0 without such columns."""
    total = 0
    for column in table.columns:
        kind = column.type
        if not pa.types.is_dictionary(kind):
            continue
        values = kind.value_type
        variable = (
            pa.types.is_string,
            pa.types.is_binary,
            pa.types.is_large_string,
            pa.types.is_large_binary,
        )
        if not any(is_kind(values) for is_kind in variable):
            continue  # fixed width: inside the per-row allowance of stream_size
        for chunk in column.chunks:
            lengths = pc.binary_length(chunk.dictionary)
            total += int(pc.sum(pc.take(lengths, chunk.indices)).as_py() or 0)
    return total


@dataclass(frozen=True)
class _Batch:
    """The fields of a ``RecordBatch`` header that size it."""

    length: int
    fields: int
    buffers: tuple[tuple[int, ...], ...]
    compressed: bool


def _record_batch(flat: _Flat, *, dictionary: bool) -> _Batch:
    message = flat.root()
    header_type = flat.scalar(message, 1, _U8, 0)
    header = flat.table(message, 2)
    expected = _DICTIONARY_BATCH if dictionary else _RECORD_BATCH
    if header_type != expected or header is None:
        raise ParseError(f"message header type {header_type}, expected {expected}")
    if dictionary:
        header = flat.table(header, 1)  # DictionaryBatch.data
        if header is None:
            raise ParseError("dictionary batch without data")
    length = flat.scalar(header, 0, _I64, 0)
    nodes = flat.vector(header, 1, 16)
    buffers = flat.vector(header, 2, 16)
    if length < 0:
        raise ParseError(f"record batch length {length} is negative")
    spans = tuple(_BUFFER.iter_unpack(flat.slice(buffers[0], buffers[1] * _BUFFER.size)))
    return _Batch(length, nodes[1], spans, flat.table(header, 3) is not None)


def _decoded(batch: _Batch, body: memoryview) -> int:
    """Bytes the batch's buffers take once decompressed."""
    total = 0
    for offset, length in batch.buffers:
        if offset < 0 or length < 0 or offset + length > len(body):
            raise ParseError(f"buffer at {offset} of {length} bytes lies outside the body")
        if not batch.compressed or length == 0:
            total += length
            continue
        if length < _PREFIX:
            raise ParseError(f"compressed buffer at {offset} shorter than its length prefix")
        (size,) = _I64.unpack_from(body, offset)
        total += length - _PREFIX if size == -1 else size
        if size < -1:
            raise ParseError(f"compressed buffer at {offset} declares {size} bytes")
    return total


class _Flat:
    """Bounds-checked reads of one FlatBuffers buffer."""

    def __init__(self, data: bytes) -> None:
        self._data = data

    def at(self, kind: struct.Struct, pos: int) -> int:
        if pos < 0 or pos + kind.size > len(self._data):
            raise ParseError(f"message header truncated at byte {pos}")
        value: int = kind.unpack_from(self._data, pos)[0]
        return value

    def slice(self, pos: int, size: int) -> bytes:
        if pos < 0 or pos + size > len(self._data):
            raise ParseError(f"message header truncated at byte {pos}")
        return self._data[pos : pos + size]

    def root(self) -> int:
        return self.at(_U32, 0)

    def _field(self, table: int, index: int) -> int:
        """The field's offset inside ``table`` (0: absent)."""
        vtable = table - self.at(_I32, table)
        size = self.at(_U16, vtable)
        slot = 4 + 2 * index
        return 0 if slot + 2 > size else self.at(_U16, vtable + slot)

    def scalar(self, table: int, index: int, kind: struct.Struct, default: int) -> int:
        offset = self._field(table, index)
        return default if offset == 0 else self.at(kind, table + offset)

    def table(self, table: int, index: int) -> int | None:
        offset = self._field(table, index)
        return None if offset == 0 else table + offset + self.at(_U32, table + offset)

    def vector(self, table: int, index: int, element: int) -> tuple[int, int]:
        """``(first element's position, element count)`` of a vector of structs."""
        offset = self._field(table, index)
        if offset == 0:
            return 0, 0
        start = table + offset + self.at(_U32, table + offset)
        count = self.at(_U32, start)
        if start + 4 + count * element > len(self._data):
            raise ParseError(f"vector of {count} elements overruns the message header")
        return start + 4, count
