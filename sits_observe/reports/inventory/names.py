"""How reports name things people recognise: a GPU as ``node/index (model)``.

A GPU UUID (``GPU-5f1c...``, 40 characters) identifies a device exactly but says nothing to a
person; tables show :func:`gpu_label` and keep the UUID in a ``-o wide`` column. Which
node, index and model a GPU has is its latest identity, read in one place for every report
and the extender (:mod:`sits_observe.store.gpu_identity`).
"""

from __future__ import annotations

from collections.abc import Mapping

import pyarrow as pa

from sits_observe.reports.window import Window
from sits_observe.store import Store
from sits_observe.store import gpu_identity as identities

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
    """One row per GPU sampled in ``window``: its latest identity
    (:mod:`sits_observe.store.gpu_identity`: ``gpu_uuid``, newest known ``node``,
    ``gpu_index`` and ``model_name``, ``seen_at``)."""
    return identities.gpu_identities(store, since=window.since, until=window.until)


def gpu_labels(store: Store, window: Window) -> Mapping[str, str]:
    """``{gpu_uuid: label}`` for every GPU sampled in ``window`` (latest node, index, model)."""
    return labels_of(gpu_identities(store, window))


def gpu_labels_of(samples: pa.Table) -> Mapping[str, str]:
    """:func:`gpu_labels` of ``gpu_samples`` rows already read (a PromQL store's): the same
    identity, by the same SQL (:func:`sits_observe.store.gpu_identity.gpu_identities_of`)."""
    return labels_of(identities.gpu_identities_of(samples))


def labels_of(identity: pa.Table) -> Mapping[str, str]:
    """``{gpu_uuid: label}`` of identity rows (:mod:`sits_observe.store.gpu_identity`)."""
    return {
        r["gpu_uuid"]: gpu_label(r["node"], r["gpu_index"], r["model_name"])
        for r in identity.to_pylist()
    }


def short_id(value: str | None, width: int = 12) -> str | None:
    """A container id cut to ``width`` characters, as ``docker ps`` / ``crictl ps`` show it."""
    return value if value is None or len(value) <= width else value[:width]
