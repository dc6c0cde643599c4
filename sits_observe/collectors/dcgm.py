"""dcgm-exporter ``/metrics`` text -> ``gpu_samples`` rows (one per GPU or MIG instance).

NVIDIA dcgm-exporter (https://github.com/NVIDIA/dcgm-exporter) serves one Prometheus series
per DCGM field per GPU. This module pivots them into one row per GPU (or per MIG GPU
instance, from the ``GPU_I_PROFILE`` / ``GPU_I_ID`` labels; whole-GPU rows have NULL MIG
fields) and converts every value to the domain's base units:

==============================================  ===================  =====================
DCGM field (and its dcgm-exporter 1.x name)     exporter unit        column
==============================================  ===================  =====================
``FB_USED`` / ``FB_FREE`` / ``FB_RESERVED``     MiB                  ``fb_*_bytes`` (x 2^20)
``FB_TOTAL`` (else free + used + reserved)      MiB                  ``fb_total_bytes``
``GPU_UTIL``, ``MEM_COPY_UTIL``                 percent              ``*_ratio`` (/ 100)
``PROF_GR_ENGINE_ACTIVE``, ``PROF_SM_ACTIVE``,  ratio 0-1            ``*_ratio`` (as is)
``PROF_PIPE_TENSOR_ACTIVE``, ``PROF_DRAM_ACTIVE``
``PROF_PCIE_{TX,RX}_BYTES``,                    bytes/s              ``*_bytes_per_s``
``PROF_NVLINK_{TX,RX}_BYTES``
``SM_CLOCK``, ``MEM_CLOCK``                     MHz                  ``*_clock_hz`` (x 1e6)
``TOTAL_ENERGY_CONSUMPTION``                    mJ                   ``energy_j`` (/ 1000)
``POWER_USAGE`` W, ``GPU_TEMP`` / ``MEMORY_TEMP`` C, ``XID_ERRORS`` (last XID code)
==============================================  ===================  =====================

Units come from the HELP strings of dcgm-exporter's ``etc/default-counters.csv`` and from
``dcgm_fields.h``. Labels: ``gpu``, ``UUID`` (1.x: ``uuid``), ``device``, ``modelName``,
``pci_bus_id``, ``DCGM_FI_DRIVER_VERSION``, ``Hostname`` (lower-case ``hostname`` since
dcgm-exporter #655; a ``node`` given by the caller wins), and the Kubernetes attribution
``namespace`` / ``pod`` / ``container`` (1.x: ``pod_namespace`` / ``pod_name`` /
``container_name``; an empty value is NULL).

Invariants: nothing here raises for bad input. A sample is dropped and counted in
``CollectResult.dropped`` under a reason when its line is malformed, its value is blank,
NaN or infinite, a DCGM blank sentinel (``DCGM_INT32_BLANK`` 0x7ffffff0,
``DCGM_FP64_BLANK`` 2^47, ``DCGM_INT64_BLANK`` 0x7ffffffffffffff0, see ``dcgm_structs.h``)
or outside its physical range (utilisation above 100 %, negative memory ...), when it
repeats a series already read, when it carries no GPU label, or when it is the last line of
a body that does not end with a newline (a truncated body: the value may be cut short).
Families that do not map to a column (encoder utilisation, remapped rows ...) are skipped
unread and counted under one reason. A row's ``ts`` is the latest timestamp its samples
carry, else the scrape time. The first line dropped whole (by position in the body) is kept
as :attr:`DcgmParser.first_rejected`, so that a one-shot import can show it; values dropped
by the columnar range checks have no line and are only counted.

Speed: the body is read in one pass with a columnar pivot (see ``docs/collectors/dcgm.md``
and ``bench/bench_ingest_dcgm.py``): each distinct label text is parsed once (and, in a
:class:`DcgmParser` kept between scrapes, once per life of the label set), values go into one
flat list, and range checks and unit conversions run on numpy columns before one Arrow table
is built. No object is created per sample.
"""

from __future__ import annotations

import math
from collections import Counter
from datetime import UTC, datetime
from typing import NamedTuple

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from sits_observe.collectors.exposition import (
    MALFORMED_LINE,
    MALFORMED_TIMESTAMP,
    parse_labels,
    read_value,
    valid_name,
)
from sits_observe.domain.collect import CollectResult
from sits_observe.domain.schema.dcgm_fields import (
    FIELDS,
    FP64_BLANK,
    INT32_BLANK,
    INT64_BLANK,
    FieldSpec,
)
from sits_observe.domain.tables import GPU_SAMPLES

#: Drop reasons specific to this collector (the exposition reader adds its own).
UNMAPPED_FAMILY = "metric family not stored"
NO_GPU_LABELS = "sample without GPU labels"
NON_FINITE = "non-finite value (NaN or Inf)"
BLANK_SENTINEL = "DCGM blank sentinel"
DUPLICATE = "duplicate series"
OUT_OF_RANGE = "out of range: {column}"
UNTERMINATED = "unterminated last line (body truncated?)"

# Prometheus timestamps we accept: 1970-01-01 up to 9999-12-31 (milliseconds).
_TS_MAX_MS = 253_402_300_799_999


_NCOLS = len(FIELDS)
_COLUMN_OF_FAMILY: dict[str, int] = {f: i for i, s in enumerate(FIELDS) for f in s.families}
_COL = {s.column: i for i, s in enumerate(FIELDS)}
_SCALES = np.array([s.scale for s in FIELDS])

# Codes of the name / label-text caches (non-negative codes are column / row indexes).
_UNMAPPED, _INVALID, _COMMENT = -1, -2, -3
_BAD_LABELS, _NO_GPU = -1, -2
_ROW_REASONS = {_BAD_LABELS: MALFORMED_LINE, _NO_GPU: NO_GPU_LABELS}
# The grid's "no value yet": one NaN object, tested by identity (as fast as ``is None``) and
# already NaN for numpy (a list with None converts ten times slower). Non-finite input
# values are dropped before they reach the grid, so a NaN there is always this one.
_EMPTY = math.nan


#: Characters of a rejected line kept for messages.
_SHOWN_LINE_CHARS = 120


class RejectedLine(NamedTuple):
    """The first line of a body that was dropped: 1-based line number, text (cut to 120
    characters) and the drop reason."""

    number: int
    text: str
    reason: str


def _rejected_line(text: str, pos: int, reason: str) -> RejectedLine:
    eol = text.find("\n", pos)
    line = text[pos:] if eol < 0 else text[pos:eol]
    return RejectedLine(text.count("\n", 0, pos) + 1, line[:_SHOWN_LINE_CHARS], reason)


class _Gpu(NamedTuple):
    """The identity and descriptive labels of one row."""

    node: str | None
    uuid: str | None
    gpu_index: int | None
    device: str | None
    model: str | None
    pci_bus_id: str | None
    driver: str | None
    mig_profile: str | None
    mig_id: int | None
    namespace: str | None
    pod: str | None
    container: str | None


def _small_int(text: str | None, limit: int) -> int | None:
    if text is None or not text.isdecimal() or len(text) > 10:
        return None
    value = int(text)
    return value if value <= limit else None


def _classify(name: str) -> int:
    stripped = name.strip()
    if stripped.startswith("#"):
        return _COMMENT
    col = _COLUMN_OF_FAMILY.get(stripped)
    if col is not None:
        return col
    return _UNMAPPED if valid_name(stripped) else _INVALID


class DcgmParser:
    """Reads dcgm-exporter bodies into ``gpu_samples`` tables; not thread-safe.

    It remembers, between bodies, which label text is which GPU row and which family is
    which column: a scraper sees the same label sets every scrape, so its steady state
    parses no label set at all. Pods come and go, and each new pod label set is a new text,
    so the memory is dropped when it grows past ``max_label_sets`` or when rows no longer
    scraped outnumber live ones three to one (past 1,024 rows).
    """

    def __init__(self, *, max_label_sets: int = 65_536) -> None:
        self.max_label_sets = max_label_sets
        self._gpus: list[_Gpu] = []
        self._row_of_key: dict[tuple[str | None, ...], int] = {}
        self._row_of_labels: dict[str, int] = {}
        self._col_of_name: dict[str, int] = {}
        self._forget()
        # Per body: the grid (row-major, ``grid[row * _NCOLS + column]``), stamps, drops.
        self._grid: list[float] = []
        self._ts_ms: dict[int, int] = {}
        self._dropped: Counter[str] = Counter()
        self._ignored: Counter[str] = Counter()
        # (start of the first dropped line, its reason) of the body being read
        self._first_bad: tuple[int, str] | None = None
        #: The first line of the last body that was dropped whole (None: none was).
        self.first_rejected: RejectedLine | None = None

    def _forget(self) -> None:
        self._gpus = []
        self._row_of_key = {}
        self._row_of_labels = {}
        self._col_of_name = {}

    def parse(self, text: str, *, now: datetime, node: str | None) -> CollectResult:
        """One body -> a :class:`CollectResult` with a ``gpu_samples`` table (maybe empty).

        ``now`` (UTC) stamps rows whose samples carry no timestamp; ``node`` (when given)
        wins over the ``Hostname`` / ``hostname`` label. Never raises for bad input.
        """
        if len(self._row_of_labels) > self.max_label_sets:
            self._forget()
        self._grid = [_EMPTY] * (len(self._gpus) * _NCOLS)
        self._ts_ms = {}
        self._dropped = Counter()
        self._ignored = Counter()
        self._first_bad = None
        self._feed(text)
        bad = self._first_bad
        self.first_rejected = None if bad is None else _rejected_line(text, bad[0], bad[1])
        table = self._table(now, node)
        if len(self._gpus) > max(1024, 4 * table.num_rows):
            self._forget()  # mostly rows of pods long gone: each scrape would pay for them
        return CollectResult({GPU_SAMPLES.name: table}, self._dropped, self._ignored)

    def _row(self, label_text: str) -> int:
        pairs = parse_labels(label_text)
        if pairs is None:
            return _BAD_LABELS
        labels = dict(pairs)
        uuid = labels.get("UUID") or labels.get("uuid") or None
        gpu = labels.get("gpu") or None
        if uuid is None and gpu is None:
            return _NO_GPU
        get = labels.get
        node = get("Hostname") or get("hostname") or None
        mig_profile = get("GPU_I_PROFILE") or None
        mig_id = get("GPU_I_ID") or None
        namespace = get("namespace") or get("pod_namespace") or None
        pod = get("pod") or get("pod_name") or None
        container = get("container") or get("container_name") or None
        key = (node, uuid, gpu, mig_profile, mig_id, namespace, pod, container)
        row = self._row_of_key.get(key)
        if row is None:
            row = self._row_of_key[key] = len(self._gpus)
            self._gpus.append(
                _Gpu(
                    node,
                    uuid,
                    _small_int(gpu, 32767),
                    get("device") or None,
                    get("modelName") or None,
                    get("pci_bus_id") or None,
                    get("DCGM_FI_DRIVER_VERSION") or None,
                    mig_profile,
                    _small_int(mig_id, 2**31 - 1),
                    namespace,
                    pod,
                    container,
                )
            )
            self._grid.extend([_EMPTY] * _NCOLS)
        return row

    def _reject(self, pos: int, reason: str, count: int = 1) -> None:
        """Count a dropped line starting at ``pos``; remember the first one of the body."""
        self._dropped[reason] += count
        if self._first_bad is None or pos < self._first_bad[0]:
            self._first_bad = (pos, reason)

    def _unlabelled(self, pos: int, line: str) -> None:
        """A line without ``{`` starting at ``pos``: a comment, or a sample naming no GPU."""
        line = line.strip()
        if not line or line[0] == "#":
            return
        pieces = line.split(None, 1)
        col = _classify(pieces[0])
        if col == _UNMAPPED:
            self._ignored[UNMAPPED_FAMILY] += 1
            return
        if col < 0:
            self._reject(pos, MALFORMED_LINE)
            return
        read = read_value(pieces[1] if len(pieces) == 2 else "")
        self._reject(pos, read if isinstance(read, str) else NO_GPU_LABELS)

    def _stamped(self, row: int, pos: int, tail: str) -> float | None:
        """The value of a line float() refused: one with a timestamp, else None (dropped)."""
        read = read_value(tail)
        if isinstance(read, str):
            self._reject(pos, read)
            return None
        value, ts_ms = read
        if ts_ms is not None:
            if not 0 <= ts_ms <= _TS_MAX_MS:
                self._reject(pos, MALFORMED_TIMESTAMP)
                return None
            if ts_ms > self._ts_ms.get(row, -1):
                self._ts_ms[row] = ts_ms
        return value

    def _feed(self, text: str) -> None:
        """Read one body into the grid: the hot loop, allocation-light per sample.

        It walks the body by positions instead of splitting it into lines (a line's
        string is never built, only its name, label text and value slices), and it
        creates no tuple per line: tuples are tracked by the cyclic garbage collector and
        made GC passes a third of the time in a line-splitting version.
        """
        grid = self._grid
        empty = _EMPTY
        col_of_name = self._col_of_name
        row_of_labels = self._row_of_labels
        reject = self._reject
        find = text.find
        rfind = text.rfind
        ncols = _NCOLS
        unmapped = 0
        pos = 0
        end = len(text)
        last = text.rfind("\n") + 1
        if last < end and text[last:].strip() and text[last:].lstrip()[0] != "#":
            # The format ends every line with \n: a body cut mid-line (a dropped connection,
            # a full disk) ends without one, and its last value may be cut short too.
            reject(last, UNTERMINATED)
            end = last
        while pos < end:
            eol = find("\n", pos)
            if eol < 0:
                eol = end
            if eol == pos or text[pos] == "#":
                pos = eol + 1
                continue
            brace = find("{", pos, eol)
            if brace < 0:
                self._unlabelled(pos, text[pos:eol])
                pos = eol + 1
                continue
            col = col_of_name.get(text[pos:brace])
            if col is None:
                col = col_of_name[text[pos:brace]] = _classify(text[pos:brace])
            if col < 0:
                if col == _UNMAPPED:
                    unmapped += 1
                elif col == _INVALID:
                    reject(pos, MALFORMED_LINE)
                pos = eol + 1
                continue
            close = rfind("}", brace, eol)
            if close < 0:
                reject(pos, MALFORMED_LINE)
                pos = eol + 1
                continue
            label_text = text[brace + 1 : close]
            row = row_of_labels.get(label_text)
            if row is None:
                row = row_of_labels[label_text] = self._row(label_text)
            if row < 0:
                reject(pos, _ROW_REASONS[row])
                pos = eol + 1
                continue
            try:
                value = float(text[close + 1 : eol])
            except ValueError:
                stamped = self._stamped(row, pos, text[close + 1 : eol])
                if stamped is None:
                    pos = eol + 1
                    continue
                value = stamped
            if value - value != 0.0:  # NaN or +-Inf
                reject(pos, NON_FINITE)
                pos = eol + 1
                continue
            k = row * ncols + col
            if grid[k] is empty:
                grid[k] = value
            else:
                reject(pos, DUPLICATE)
            pos = eol + 1
        if unmapped:
            self._ignored[UNMAPPED_FAMILY] += unmapped

    def _table(self, now: datetime, node: str | None) -> pa.Table:
        """Validate, convert and pivot the grid into a ``gpu_samples`` table."""
        rows = len(self._gpus)
        if rows == 0:
            return GPU_SAMPLES.schema.empty_table()
        matrix = np.array(self._grid, dtype=np.float64).reshape(rows, _NCOLS)
        with np.errstate(invalid="ignore"):
            for j, spec in enumerate(FIELDS):
                self._check(matrix[:, j], spec)
            matrix *= _SCALES
        _fill_total(matrix)
        # Rows this body did not mention (remembered GPUs) or whose every sample was dropped.
        keep: npt.NDArray[np.bool_] = np.any(~np.isnan(matrix), axis=1)
        gpus = self._gpus
        if not keep.all():
            matrix = matrix[keep]
            gpus = [gpus[i] for i in np.flatnonzero(keep).tolist()]
        n = len(gpus)
        columns = list(zip(*gpus, strict=True)) if gpus else [()] * len(_Gpu._fields)
        ident = dict(zip(_Gpu._fields, columns, strict=True))
        arrays: dict[str, pa.Array] = {
            "ts": self._timestamps(now, keep),
            "node": pa.array([node] * n if node else ident["node"], pa.string()),
            "gpu_uuid": pa.array(ident["uuid"], pa.string()),
            "gpu_index": pa.array(ident["gpu_index"], pa.int16()),
            "device": pa.array(ident["device"], pa.string()),
            "model_name": pa.array(ident["model"], pa.string()),
            "pci_bus_id": pa.array(ident["pci_bus_id"], pa.string()),
            "driver_version": pa.array(ident["driver"], pa.string()),
            "mig_profile": pa.array(ident["mig_profile"], pa.string()),
            "mig_instance_id": pa.array(ident["mig_id"], pa.int32()),
            "namespace": pa.array(ident["namespace"], pa.string()),
            "pod": pa.array(ident["pod"], pa.string()),
            "container": pa.array(ident["container"], pa.string()),
            "source": pa.array(["dcgm"] * n, pa.string()),
        }
        for j, spec in enumerate(FIELDS):
            arrays[spec.column] = _column(matrix[:, j], spec.integer)
        schema = GPU_SAMPLES.schema
        return pa.Table.from_arrays([arrays[f.name] for f in schema], schema=schema)

    def _check(self, values: npt.NDArray[np.float64], spec: FieldSpec) -> None:
        """Blank out (NaN) and count sentinels and out-of-range values, in place."""
        present = ~np.isnan(values)
        if not present.any():
            return
        # A sentinel window that lies inside the field's physical range is a real value there.
        sentinel = values >= INT64_BLANK
        if spec.high < INT32_BLANK:
            sentinel |= (values >= INT32_BLANK) & (values <= INT32_BLANK + 15)
        if spec.high < FP64_BLANK:
            sentinel |= (values >= FP64_BLANK) & (values <= FP64_BLANK + 15)
        bad = present & ~sentinel & ((values < spec.low) | (values > spec.high))
        for mask, reason in (
            (sentinel, BLANK_SENTINEL),
            (bad, OUT_OF_RANGE.format(column=spec.column)),
        ):
            count = int(mask.sum())
            if count:
                self._dropped[reason] += count
                values[mask] = np.nan

    def _timestamps(self, now: datetime, keep: npt.NDArray[np.bool_]) -> pa.Array:
        stamps = np.full(len(self._gpus), _epoch_us(now), dtype=np.int64)
        for row, ts_ms in self._ts_ms.items():
            stamps[row] = ts_ms * 1000
        return pa.array(stamps[keep], pa.timestamp("us"))


def _fill_total(matrix: npt.NDArray[np.float64]) -> None:
    """fb_total = free + used + reserved (reserved 0 when absent) where no FB_TOTAL came."""
    total = matrix[:, _COL["fb_total_bytes"]]
    missing = np.isnan(total)
    if missing.any():
        derived = (
            matrix[:, _COL["fb_free_bytes"]]
            + matrix[:, _COL["fb_used_bytes"]]
            + np.nan_to_num(matrix[:, _COL["fb_reserved_bytes"]], nan=0.0)
        )
        total[missing] = derived[missing]


def _column(values: npt.NDArray[np.float64], integer: bool) -> pa.Array:
    mask = np.isnan(values)
    if integer:
        return pa.array(
            np.where(mask, 0.0, np.rint(values)).astype(np.int64), pa.int64(), mask=mask
        )
    return pa.array(values, pa.float64(), mask=mask)


def _epoch_us(ts: datetime) -> int:
    """Microseconds since the epoch of ``ts`` (naive means UTC)."""
    aware = ts if ts.tzinfo is not None else ts.replace(tzinfo=UTC)
    delta = aware - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def parse_dcgm(text: str, *, now: datetime, node: str | None) -> CollectResult:
    """Read one dcgm-exporter body into ``gpu_samples`` rows; never raises for bad input.

    ``now`` (UTC) stamps rows whose samples carry no timestamp; ``node`` (when given) wins
    over the ``Hostname`` / ``hostname`` label. (A fresh :class:`DcgmParser` each call.)
    """
    return DcgmParser().parse(text, now=now, node=node)
