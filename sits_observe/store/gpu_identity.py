"""A GPU's latest identity: the one answer to "which node, index and model is this GPU".

Every report that names a GPU, the exporter's GPU labels, the live FGD view and the
scheduler extender read it here, so a GPU is never ``node-3/0`` in one place and
``node-3/?`` in another. Per ``gpu_uuid`` sampled in the window:

- ``node``, ``gpu_index``, ``model_name``: each the newest *known* value (a sample without
  one, as a collector that could not read it sends, does not hide an older one that has it);
- ``seen_at``: the newest sample's time.

:func:`identity_sql` is the query (to run alone or as a CTE inside a larger one);
:func:`gpu_identities` runs it on the store, :func:`gpu_identities_of` on ``gpu_samples``
rows already read (a PromQL source's), with DuckDB in memory: the same SQL either way.
"""

from __future__ import annotations

from datetime import datetime

import duckdb
import pyarrow as pa

from sits_observe.store.duck import Store
from sits_observe.store.rows import IN_WINDOW, in_window_params

__all__ = ["gpu_identities", "gpu_identities_of", "identity_sql"]


_NEEDED = ("ts", "gpu_uuid", "node", "gpu_index", "model_name", "mig_instance_id")


def identity_sql(
    where: str = "TRUE", *, source: str = "gpu_samples", whole_gpu: bool = False
) -> str:
    """One row per GPU (``gpu_uuid``, ``node``, ``gpu_index``, ``model_name``, ``seen_at``) of
    the ``source`` rows matching ``where``; ``whole_gpu`` reads whole-GPU samples only (no MIG
    instance's), as placement does."""
    whole = " AND mig_instance_id IS NULL" if whole_gpu else ""
    return f"""
SELECT gpu_uuid,
       arg_max(node, ts) FILTER (WHERE node IS NOT NULL) AS node,
       arg_max(gpu_index, ts) FILTER (WHERE gpu_index IS NOT NULL) AS gpu_index,
       arg_max(model_name, ts) FILTER (WHERE model_name IS NOT NULL) AS model_name,
       max(ts) AS seen_at
FROM {source}
WHERE gpu_uuid IS NOT NULL{whole} AND ({where})
GROUP BY gpu_uuid
"""


def gpu_identities(
    store: Store, *, since: datetime | None, until: datetime, whole_gpu: bool = False
) -> pa.Table:
    """The identity of every GPU sampled in ``[since, until)`` (``since`` None: from the
    first sample), in no set order."""
    return store.query(identity_sql(IN_WINDOW, whole_gpu=whole_gpu), in_window_params(since, until))


def gpu_identities_of(samples: pa.Table) -> pa.Table:
    """:func:`gpu_identities` of ``gpu_samples`` rows already read (the columns it needs:
    ``ts``, ``gpu_uuid``, ``node``, ``gpu_index``, ``model_name``, ``mig_instance_id``)."""
    with duckdb.connect() as con:
        con.register("samples", samples.select(list(_NEEDED)))
        return con.sql(identity_sql(source="samples")).to_arrow_table()
