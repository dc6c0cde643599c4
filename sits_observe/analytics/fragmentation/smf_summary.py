"""SMF summaries: the aligned SMF rows of :mod:`.smf` grouped per container, GPU, node or
model, in SQL over the aligned rows."""

from __future__ import annotations

import duckdb

from sits_observe.analytics.fragmentation.smf import SmfAlignment, SmfGrouping, SmfSummary

_GROUP_KEYS: dict[SmfGrouping, tuple[str, ...]] = {
    SmfGrouping.container: ("node", "container_id"),
    SmfGrouping.gpu: ("node", "gpu_uuid"),
    SmfGrouping.pair: ("node", "container_id", "gpu_uuid"),
}


_SUMMARY = """
WITH keyed AS (
    SELECT {keys}, ts, smf, gpu_uuid AS g_id, container_id AS c_id,
           namespace, pod, container, 1 AS aligned, 0 AS unmatched FROM r
    UNION ALL BY NAME
    SELECT {keys}, NULL::TIMESTAMP AS ts, NULL::DOUBLE AS smf, gpu_uuid AS g_id,
           container_id AS c_id, namespace, pod, container, 0 AS aligned,
           unmatched_samples AS unmatched FROM u
), latest AS (
    SELECT {keys}, max(ts) AS latest_at FROM keyed GROUP BY {keys}
)
SELECT {keys}, any_value(latest.latest_at) AS latest_at,
       avg(smf) FILTER (WHERE keyed.ts = latest.latest_at) AS latest_smf,
       avg(smf) AS mean_smf, max(smf) AS max_smf,
       sum(aligned)::BIGINT AS samples, sum(unmatched)::BIGINT AS unmatched_samples,
       list_sort(list_distinct(list(g_id))) AS gpu_uuids,
       list_sort(list_distinct(list(c_id))) AS container_ids,
       max_by(namespace, coalesce(keyed.ts, TIMESTAMP '1970-01-01')) AS namespace,
       max_by(pod, coalesce(keyed.ts, TIMESTAMP '1970-01-01')) AS pod,
       max_by(container, coalesce(keyed.ts, TIMESTAMP '1970-01-01')) AS container
FROM keyed JOIN latest USING ({keys})
GROUP BY {keys}
ORDER BY {keys}
"""


def summarize_smf(
    alignment: SmfAlignment, by: SmfGrouping = SmfGrouping.container
) -> tuple[SmfSummary, ...]:
    """Latest, mean and max SMF, aligned and unmatched counts per container, GPU or pair.

    Groups with only unmatched samples are included (SMF fields None), so a container whose
    GPU samples never arrive in time is visible rather than missing.
    """
    keys = _GROUP_KEYS[by]
    con = duckdb.connect(":memory:")
    try:
        con.register("r", alignment.rows)
        con.register("u", alignment.unmatched)
        table = con.sql(_SUMMARY.format(keys=", ".join(keys))).to_arrow_table()
    finally:
        con.close()
    out: list[SmfSummary] = []
    for row in table.to_pylist():
        per_container = by is not SmfGrouping.gpu
        out.append(
            SmfSummary(
                node=row["node"],
                container_id=row.get("container_id"),
                namespace=row["namespace"] if per_container else None,
                pod=row["pod"] if per_container else None,
                container=row["container"] if per_container else None,
                gpu_uuid=row.get("gpu_uuid"),
                gpu_uuids=tuple(x for x in row["gpu_uuids"] if x is not None),
                container_ids=tuple(x for x in row["container_ids"] if x is not None),
                latest_at=row["latest_at"],
                latest_smf=row["latest_smf"],
                mean_smf=row["mean_smf"],
                max_smf=row["max_smf"],
                samples=int(row["samples"]),
                unmatched_samples=int(row["unmatched_samples"]),
            )
        )
    return tuple(out)
