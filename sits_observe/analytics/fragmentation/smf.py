"""The SMF fragmentation rate of the SITS 2026 documents, per container and GPU.

Definition (``../shared/SPEC.md``, implemented exactly and named as the documents name it)::

    smf = (fb_free - mem_current) / fb_total   if fb_free > mem_current   else 0.0

with ``fb_free`` / ``fb_total`` the GPU's framebuffer from DCGM (``fb_free_bytes``,
``fb_total_bytes``) and ``mem_current`` the container's cgroup v2 ``memory.current``
(``memory_current_bytes``, host memory). The quantity mixes host and GPU memory; see
docs/analytics/smf.md for what it does and does not measure.

Which container goes with which GPU (a *link*, fixed for a container's life because the
device plugin allocates GPUs when a container is created):

- ``labels``: a ``gpu_samples`` row names the pod holding the GPU (dcgm-exporter pod
  attribution: ``namespace`` / ``pod`` / ``container``); it links to the ``container_id`` whose
  ``container_samples`` carry the same node and names (filled by inventory attribution), if
  the labelled GPU sample falls within that container id's sampled life (± the skew);
- ``nvml_process``: a ``gpu_processes`` row (NVML) names ``container_id`` and ``gpu_uuid``.

Alignment rule (as-of join, DuckDB ``ASOF JOIN``): each cgroup sample of a linked container
is matched, for each linked GPU (or MIG instance), to the latest GPU sample of that GPU on the
same node taken at or before the cgroup sample and carrying both framebuffer fields. It is
*matched* when ``0 <= cgroup ts - GPU ts <= max_skew_s``; otherwise it is *unmatched* and
counted, never interpolated or guessed. The aligned timestamp ``ts`` is the cgroup sample's;
``skew_s`` says how much older the GPU sample was. When a GPU has DCGM (or simulated) rows,
its NVML rows are ignored, so ``fb_*`` come from DCGM whenever DCGM measured them.

Everything here is a pure function over Arrow tables (a private in-memory DuckDB runs the
SQL); :func:`read_smf_inputs` is the one function that reads a :class:`Store`, and
:func:`read_smf_sources` reads the same columns through the source Protocols (a PromQL store:
there are no ``gpu_processes`` rows there, so containers link by DCGM pod labels only).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

from sits_observe.analytics.fragmentation.settings import SmfSettings
from sits_observe.analytics.source import ContainerSeriesSource, GpuSeriesSource
from sits_observe.domain.tables import CONTAINER_SAMPLES, GPU_PROCESSES, GPU_SAMPLES
from sits_observe.domain.times import utc_naive
from sits_observe.store.duck import Store

#: Columns each input needs (a table may carry more; missing ones are read as NULL).
GPU_COLUMNS = (
    "ts",
    "node",
    "gpu_uuid",
    "mig_instance_id",
    "namespace",
    "pod",
    "container",
    "fb_free_bytes",
    "fb_total_bytes",
    "source",
)
CONTAINER_COLUMNS = (
    "ts",
    "node",
    "container_id",
    "namespace",
    "pod",
    "container",
    "memory_current_bytes",
)
PROCESS_COLUMNS = ("ts", "node", "gpu_uuid", "mig_instance_id", "container_id")

#: One aligned sample: the attribution fields, both sources' values and the SMF.
SMF_ROW_SCHEMA = pa.schema(
    [
        ("ts", pa.timestamp("us")),
        ("gpu_ts", pa.timestamp("us")),
        ("node", pa.string()),
        ("container_id", pa.string()),
        ("namespace", pa.string()),
        ("pod", pa.string()),
        ("container", pa.string()),
        ("gpu_uuid", pa.string()),
        ("mig_instance_id", pa.int32()),
        ("link", pa.string()),
        ("fb_free_bytes", pa.int64()),
        ("fb_total_bytes", pa.int64()),
        ("memory_current_bytes", pa.int64()),
        ("smf", pa.float64()),
        ("skew_s", pa.float64()),
    ]
)


class SmfGrouping(StrEnum):
    """What one summary row stands for."""

    container = "container"
    gpu = "gpu"
    pair = "pair"


@dataclass(frozen=True)
class SmfInputs:
    """The three tables SMF reads, restricted to a time window."""

    gpu_samples: pa.Table
    container_samples: pa.Table
    gpu_processes: pa.Table


@dataclass(frozen=True)
class SmfAlignment:
    """Everything :func:`align_smf` found.

    ``rows``: one per matched (cgroup sample, linked GPU), schema :data:`SMF_ROW_SCHEMA`.
    ``unmatched``: per (container, GPU) link, the cgroup samples with no GPU sample within the
    skew (``unmatched_samples``) and the closest older GPU sample's age (``closest_skew_s``,
    NULL when the GPU had no earlier sample at all).
    ``unlinked_gpus``: GPUs seen in ``gpu_samples`` that no container links to, with why.
    ``skipped``: input rows left out, by reason (NULL ``memory.current``, no framebuffer
    fields, no container id, ...).
    """

    rows: pa.Table
    unmatched: pa.Table
    unlinked_gpus: pa.Table
    skipped: Mapping[str, int]
    linked_containers: int
    unlinked_containers: int
    settings: SmfSettings

    @property
    def unmatched_samples(self) -> int:
        """Cgroup samples (per linked GPU) that found no GPU sample within the skew."""
        column = self.unmatched.column("unmatched_samples")
        return int(pc.sum(column).as_py() or 0)


@dataclass(frozen=True)
class SmfSummary:
    """SMF statistics of one container, GPU or (container, GPU) pair.

    ``latest_smf`` is the mean SMF of the group's rows at its latest aligned timestamp (one
    value for a pair; the mean over GPUs, or containers, of that moment otherwise).
    ``samples`` counts aligned rows; ``unmatched_samples`` the cgroup samples that found no
    GPU sample within the skew. SMF fields are None when the group has no aligned row.
    """

    node: str
    container_id: str | None
    namespace: str | None
    pod: str | None
    container: str | None
    gpu_uuid: str | None
    gpu_uuids: tuple[str, ...]
    container_ids: tuple[str, ...]
    latest_at: datetime | None
    latest_smf: float | None
    mean_smf: float | None
    max_smf: float | None
    samples: int
    unmatched_samples: int


def smf_value(fb_free_bytes: int, memory_current_bytes: int, fb_total_bytes: int) -> float:
    """The documents' formula for one aligned sample (``fb_total_bytes`` must be > 0)."""
    if fb_free_bytes > memory_current_bytes:
        return (fb_free_bytes - memory_current_bytes) / fb_total_bytes
    return 0.0


def read_smf_inputs(
    store: Store,
    *,
    since: datetime | None = None,
    until: datetime | None = None,
    settings: SmfSettings | None = None,
) -> SmfInputs:
    """Read the columns SMF needs from ``store``, ``since <= ts < until`` (UTC; None = open).

    GPU samples are read from ``max_skew_s`` before ``since`` so that the first cgroup samples
    of the window can still find their GPU sample.
    """
    settings = settings or SmfSettings()
    bound = None if since is None else utc_naive(since)
    end = None if until is None else utc_naive(until)
    gpu_bound = None if bound is None else bound - timedelta(seconds=settings.max_skew_s)

    def read(table: str, columns: tuple[str, ...], start: datetime | None) -> pa.Table:
        sql = (
            f"SELECT {', '.join(columns)} FROM {table} "
            "WHERE (? IS NULL OR ts >= ?) AND (? IS NULL OR ts < ?)"
        )
        return store.query(sql, [start, start, end, end])

    return SmfInputs(
        gpu_samples=read(GPU_SAMPLES.name, GPU_COLUMNS, gpu_bound),
        container_samples=read(CONTAINER_SAMPLES.name, CONTAINER_COLUMNS, bound),
        gpu_processes=read(GPU_PROCESSES.name, PROCESS_COLUMNS, bound),
    )


def read_smf_sources(
    gpus: GpuSeriesSource,
    containers: ContainerSeriesSource,
    *,
    since: datetime,
    until: datetime,
    settings: SmfSettings | None = None,
    step_s: float | None = None,
) -> SmfInputs:
    """:func:`read_smf_inputs` through sources: GPU samples from ``max_skew_s`` before
    ``since`` (the same rule), cgroup samples in ``[since, until)``, no ``gpu_processes``.

    With ``step_s`` both are read on one grid (the GPU read starts a whole number of steps
    earlier), so a cgroup point meets the GPU point of the same grid time: a GPU grid offset
    from the cgroup one would pair each cgroup sample with the previous step's GPU sample.
    """
    settings = settings or SmfSettings()
    back_s = settings.max_skew_s
    if step_s is not None:
        back_s = math.ceil(back_s / step_s) * step_s
    gpu_since = since - timedelta(seconds=back_s)
    gpu_columns = [c for c in GPU_COLUMNS if c not in ("ts", "source")]
    return SmfInputs(
        gpu_samples=gpus.gpu_samples(gpu_since, until, step_s=step_s, columns=gpu_columns),
        container_samples=containers.container_samples(
            since, until, step_s=step_s, columns=["memory_current_bytes"]
        ),
        gpu_processes=GPU_PROCESSES.schema.empty_table(),
    )


def _select(data: pa.Table | None, spec_schema: pa.Schema, columns: tuple[str, ...]) -> pa.Table:
    """``columns`` of ``data`` cast to the table contract's types; absent ones as NULL."""
    rows = 0 if data is None else data.num_rows
    arrays = []
    for name in columns:
        dtype = spec_schema.field(name).type
        if data is not None and name in data.column_names:
            arrays.append(data.column(name).cast(dtype))
        else:
            arrays.append(pa.nulls(rows, dtype))
    return pa.Table.from_arrays(arrays, names=list(columns))


# The SQL below runs on a private connection where g, c and p are the three inputs.
#: The GPU samples SMF uses (`gpu`): framebuffer fields present, one source per GPU. Shared,
#: with LINKS_SQL, by :mod:`sits_observe.analytics.fragmentation.smf_latest`.
GPU_SQL = """
-- A GPU's NVML rows are kept only when it has no DCGM (or simulated) row (an anti join:
-- cheaper than a window over every sample).
CREATE TEMP TABLE gpu AS
WITH f AS (
    SELECT ts, node, gpu_uuid, coalesce(mig_instance_id, -1) AS mig_key,
           namespace, pod, container, fb_free_bytes, fb_total_bytes,
           source IS NOT DISTINCT FROM 'nvml' AS nvml
    FROM g
    WHERE ts IS NOT NULL AND node IS NOT NULL AND gpu_uuid IS NOT NULL
      AND fb_free_bytes IS NOT NULL AND fb_total_bytes > 0
)
SELECT * EXCLUDE (nvml) FROM f WHERE NOT nvml
UNION ALL
SELECT * EXCLUDE (nvml) FROM f
WHERE nvml AND (node, gpu_uuid) NOT IN (SELECT (node, gpu_uuid) FROM f WHERE NOT nvml);
"""

#: The cgroup samples SMF uses (`cg`), each container id's names and span (`names`) and the
#: container-GPU links (`links`).
LINKS_SQL = """
CREATE TEMP TABLE cg AS
SELECT ts, node, container_id, namespace, pod, container, memory_current_bytes
FROM c
WHERE ts IS NOT NULL AND node IS NOT NULL AND container_id IS NOT NULL
  AND memory_current_bytes IS NOT NULL;

-- The names each container id was attributed, and the span of its samples.
CREATE TEMP TABLE names AS
SELECT node, container_id,
       max_by(namespace, ts) FILTER (WHERE pod IS NOT NULL) AS namespace,
       max_by(pod, ts) FILTER (WHERE pod IS NOT NULL) AS pod,
       max_by(container, ts) FILTER (WHERE pod IS NOT NULL) AS container,
       min(ts) AS first_ts, max(ts) AS last_ts
FROM cg GROUP BY node, container_id;

CREATE TEMP TABLE links AS
SELECT node, gpu_uuid, mig_key, container_id, string_agg(DISTINCT via, '+' ORDER BY via) AS link
FROM (
    SELECT DISTINCT gpu.node, gpu.gpu_uuid, gpu.mig_key, n.container_id, 'labels' AS via
    FROM gpu JOIN names AS n
      ON gpu.node = n.node AND gpu.namespace = n.namespace AND gpu.pod = n.pod
     AND gpu.container = n.container
    WHERE gpu.ts BETWEEN n.first_ts - to_microseconds($skew_us)
                     AND n.last_ts + to_microseconds($skew_us)
    UNION ALL
    SELECT DISTINCT node, gpu_uuid, coalesce(mig_instance_id, -1), container_id, 'nvml_process'
    FROM p
    WHERE node IS NOT NULL AND gpu_uuid IS NOT NULL AND container_id IS NOT NULL
)
GROUP BY ALL;
"""

PREPARE_SQL = GPU_SQL + LINKS_SQL

# Every linked cgroup sample, as-of joined to its GPU's latest sample at or before it.
_JOIN = """
CREATE TEMP TABLE joined AS
SELECT s.ts, gpu.ts AS gpu_ts, s.node, s.container_id,
       coalesce(s.namespace, n.namespace) AS namespace, coalesce(s.pod, n.pod) AS pod,
       coalesce(s.container, n.container) AS container,
       s.gpu_uuid, s.mig_key, s.link, gpu.fb_free_bytes, gpu.fb_total_bytes,
       s.memory_current_bytes,
       date_diff('microsecond', gpu.ts, s.ts) AS skew_us
FROM (SELECT cg.*, l.gpu_uuid, l.mig_key, l.link
      FROM cg JOIN links AS l ON cg.node = l.node AND cg.container_id = l.container_id) AS s
ASOF LEFT JOIN gpu
  ON s.node = gpu.node AND s.gpu_uuid = gpu.gpu_uuid AND s.mig_key = gpu.mig_key
 AND gpu.ts <= s.ts
LEFT JOIN names AS n ON s.node = n.node AND s.container_id = n.container_id;
"""

_ROWS = """
SELECT ts, gpu_ts, node, container_id, namespace, pod, container, gpu_uuid,
       CASE WHEN mig_key < 0 THEN NULL ELSE mig_key END::INTEGER AS mig_instance_id, link,
       fb_free_bytes, fb_total_bytes, memory_current_bytes,
       CASE WHEN fb_free_bytes > memory_current_bytes
            THEN (fb_free_bytes - memory_current_bytes)::DOUBLE / fb_total_bytes::DOUBLE
            ELSE 0.0 END AS smf,
       skew_us / 1e6 AS skew_s
FROM joined WHERE skew_us IS NOT NULL AND skew_us <= $skew_us
ORDER BY ts, node, container_id, gpu_uuid, mig_key
"""

_UNMATCHED = """
SELECT node, container_id, any_value(namespace) AS namespace, any_value(pod) AS pod,
       any_value(container) AS container, gpu_uuid,
       CASE WHEN mig_key < 0 THEN NULL ELSE mig_key END::INTEGER AS mig_instance_id,
       count(*) AS unmatched_samples, min(skew_us) / 1e6 AS closest_skew_s
FROM joined WHERE skew_us IS NULL OR skew_us > $skew_us
GROUP BY node, container_id, gpu_uuid, mig_key
ORDER BY node, container_id, gpu_uuid, mig_key
"""

_UNLINKED = """
SELECT gpu.node, gpu.gpu_uuid,
       CASE WHEN gpu.mig_key < 0 THEN NULL ELSE gpu.mig_key END::INTEGER AS mig_instance_id,
       count(*) AS gpu_samples,
       max_by(gpu.namespace || '/' || gpu.pod || '/' || gpu.container, gpu.ts)
           FILTER (WHERE gpu.pod IS NOT NULL) AS labelled_as,
       CASE WHEN count(gpu.pod) > 0
            THEN 'its DCGM pod labels match no container_samples (cgroup samples of that '
                 || 'container missing, or not yet attributed by the inventory)'
            ELSE 'no pod labels on its DCGM samples and no NVML process rows (idle, or '
                 || 'dcgm-exporter pod attribution off)' END AS reason
FROM gpu ANTI JOIN links AS l
  ON gpu.node = l.node AND gpu.gpu_uuid = l.gpu_uuid AND gpu.mig_key = l.mig_key
GROUP BY gpu.node, gpu.gpu_uuid, gpu.mig_key
ORDER BY gpu.node, gpu.gpu_uuid, gpu.mig_key
"""

_SKIPPED = """
SELECT
  (SELECT count(*) FROM g WHERE ts IS NULL OR node IS NULL OR gpu_uuid IS NULL)
      AS gpu_rows_without_identity,
  (SELECT count(*) FROM g WHERE ts IS NOT NULL AND node IS NOT NULL AND gpu_uuid IS NOT NULL
      AND (fb_free_bytes IS NULL OR coalesce(fb_total_bytes, 0) <= 0))
      AS gpu_rows_without_framebuffer,
  (SELECT count(*) FROM c WHERE ts IS NULL OR node IS NULL OR container_id IS NULL)
      AS container_rows_without_identity,
  (SELECT count(*) FROM c WHERE ts IS NOT NULL AND node IS NOT NULL
      AND container_id IS NOT NULL AND memory_current_bytes IS NULL)
      AS container_rows_without_memory_current,
  (SELECT count(*) FROM cg ANTI JOIN links AS l
      ON cg.node = l.node AND cg.container_id = l.container_id)
      AS container_rows_of_unlinked_containers,
  (SELECT count(DISTINCT (node, container_id)) FROM links) AS linked_containers,
  (SELECT count(*) FROM names ANTI JOIN links AS l
      ON names.node = l.node AND names.container_id = l.container_id) AS unlinked_containers
"""


def prepare(con: duckdb.DuckDBPyConnection, script: str, skew_us: int) -> None:
    """Run the ``;``-separated statements of ``script`` on ``con`` (``$skew_us`` bound)."""
    for statement in script.split(";"):
        if statement.strip():
            con.execute(statement, {"skew_us": skew_us} if "$skew_us" in statement else None)


def register_inputs(
    con: duckdb.DuckDBPyConnection,
    gpu_samples: pa.Table,
    container_samples: pa.Table,
    gpu_processes: pa.Table | None,
) -> None:
    """The three inputs as ``g``, ``c`` and ``p`` on ``con``, cast to the table contracts."""
    con.register("g", _select(gpu_samples, GPU_SAMPLES.schema, GPU_COLUMNS))
    con.register("c", _select(container_samples, CONTAINER_SAMPLES.schema, CONTAINER_COLUMNS))
    con.register("p", _select(gpu_processes, GPU_PROCESSES.schema, PROCESS_COLUMNS))


def align_smf(
    gpu_samples: pa.Table,
    container_samples: pa.Table,
    gpu_processes: pa.Table | None = None,
    *,
    settings: SmfSettings | None = None,
) -> SmfAlignment:
    """Link containers to GPUs, align their samples and compute the SMF of every match.

    The inputs are ``gpu_samples``, ``container_samples`` and (optionally) ``gpu_processes``
    rows (any superset of :data:`GPU_COLUMNS`, :data:`CONTAINER_COLUMNS`,
    :data:`PROCESS_COLUMNS`; absent columns count as NULL). See the module docstring for the
    link and alignment rules. Empty inputs give empty results, never an error.
    """
    settings = settings or SmfSettings()
    skew_us = round(settings.max_skew_s * 1e6)
    con = duckdb.connect(":memory:")
    try:
        register_inputs(con, gpu_samples, container_samples, gpu_processes)
        prepare(con, PREPARE_SQL + ";" + _JOIN, skew_us)
        rows = con.sql(_ROWS, params={"skew_us": skew_us}).to_arrow_table().cast(SMF_ROW_SCHEMA)
        unmatched = con.sql(_UNMATCHED, params={"skew_us": skew_us}).to_arrow_table()
        unlinked = con.sql(_UNLINKED).to_arrow_table()
        counts = con.sql(_SKIPPED).to_arrow_table().to_pylist()[0]
    finally:
        con.close()
    linked = int(counts.pop("linked_containers"))
    unlinked_containers = int(counts.pop("unlinked_containers"))
    return SmfAlignment(
        rows=rows,
        unmatched=unmatched,
        unlinked_gpus=unlinked,
        skipped={k: int(v) for k, v in counts.items() if v},
        linked_containers=linked,
        unlinked_containers=unlinked_containers,
        settings=settings,
    )
