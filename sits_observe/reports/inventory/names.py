"""How reports name things people recognise: a GPU as ``node/index (model)``.

A GPU UUID (``GPU-5f1c...``, 40 characters) identifies a device exactly but says nothing to a
person; tables show :func:`gpu_label` and keep the UUID in a ``-o wide`` column.

polars is imported by :func:`gpu_labels_of` alone, on first use: ``serve`` imports this
module before its port is up (the exporter's GPU labels), and polars (about 0.15 s) would
delay the scheduler extender's first answer (docs/extender.md, cold start).
"""

from __future__ import annotations

from collections.abc import Mapping

import pyarrow as pa

from sits_observe.reports.window import Window
from sits_observe.store import Store

#: The newest node and the newest known index and model name of each GPU (a sample without
#: an index or a model does not hide an older one that has it).
_GPUS_SQL = """
SELECT gpu_uuid, arg_max(node, ts) AS node,
       arg_max(gpu_index, ts) FILTER (WHERE gpu_index IS NOT NULL) AS gpu_index,
       arg_max(model_name, ts) FILTER (WHERE model_name IS NOT NULL) AS model_name
FROM gpu_samples
WHERE gpu_uuid IS NOT NULL AND ts < ? AND (? IS NULL OR ts >= ?)
GROUP BY gpu_uuid
"""

#: Words dropped from product names to keep labels short ("NVIDIA H100 80GB HBM3" -> "H100 80GB").
_NOISE = ("NVIDIA", "HBM3", "HBM3e", "HBM2e", "PCIe", "SXM4", "SXM5", "SXM")


def short_model(model: str | None) -> str:
    """``NVIDIA H100 80GB HBM3`` -> ``H100 80GB``; unknown stays empty."""
    if not model:
        return ""
    words = [w for w in model.replace("-", " ").split() if w not in _NOISE]
    return " ".join(words) or model


def gpu_label(node: str | None, index: int | None, model: str | None) -> str:
    """``node-3/0 (H100 80GB)``; parts that are unknown are left out."""
    base = f"{node or '?'}/{'?' if index is None else index}"
    short = short_model(model)
    return f"{base} ({short})" if short else base


def gpu_identities(store: Store, window: Window) -> pa.Table:
    """One row per GPU sampled in ``window``: ``gpu_uuid``, its newest ``node`` and its newest
    known ``gpu_index`` and ``model_name`` (NULL when no sample in the window has one)."""
    return store.query(_GPUS_SQL, [window.until, window.since, window.since])


def gpu_labels(store: Store, window: Window) -> Mapping[str, str]:
    """``{gpu_uuid: label}`` for every GPU sampled in ``window`` (latest node, index, model)."""
    rows = gpu_identities(store, window).to_pylist()
    return {r["gpu_uuid"]: gpu_label(r["node"], r["gpu_index"], r["model_name"]) for r in rows}


def gpu_labels_of(samples: pa.Table) -> Mapping[str, str]:
    """:func:`gpu_labels` of ``gpu_samples`` rows already read (a PromQL store's): the newest
    node, and the newest known index and model name, of each GPU in ``samples``."""
    import polars as pl  # on first use: the module docstring

    frame = pl.from_arrow(samples.select(["ts", "gpu_uuid", "node", "gpu_index", "model_name"]))
    assert isinstance(frame, pl.DataFrame)
    latest = (
        frame.filter(pl.col("gpu_uuid").is_not_null())
        .sort("ts")
        .group_by("gpu_uuid")
        .agg(
            pl.col("node").last(),
            pl.col("gpu_index").drop_nulls().last(),
            pl.col("model_name").drop_nulls().last(),
        )
    )
    return {
        r["gpu_uuid"]: gpu_label(r["node"], r["gpu_index"], r["model_name"])
        for r in latest.iter_rows(named=True)
    }


def short_id(value: str | None, width: int = 12) -> str | None:
    """A container id cut to ``width`` characters, as ``docker ps`` / ``crictl ps`` show it."""
    return value if value is None or len(value) <= width else value[:width]
