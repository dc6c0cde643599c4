"""GPU samples joined to the containers that hold each GPU, with an explicit unattributed bucket.

The join is by GPU identity, as dcgm-exporter's own attribution does it (its #714 lays out the
mechanism): each :class:`~.client.Holder` from the kubelet is resolved to the GPU samples of
the same tick it names, then every sample gets its holders:

- a **device-plugin** device id is the GPU's UUID (``GPU-...``; a time-sliced replica
  ``GPU-...::<n>`` is the same GPU) or, under ``deviceIDStrategy=index``, its index;
- a **DRA** device of NVIDIA's driver is ``gpu-<minor>`` (the GPU ``/dev/nvidia<minor>``,
  dcgm-exporter's ``device`` label) or ``gpu-<minor>-mig-<profile without dots>-<id>-<start>``
  (a MIG device of that GPU: the sample of that GPU with that MIG profile).

Per sample, the result (``gpu_attribution``, one row per holder, or one row without a pod):

- ``bucket = pod``: every holder is in one pod. The sample's ``namespace`` / ``pod`` (and
  ``container``, when one container holds it) are filled in ``gpu_samples`` unless the
  exporter already named them.
- ``bucket = unattributed``, with the reason: ``shared`` (several pods hold the device:
  time-slicing, MPS clients, consumable shares; a GPU counter cannot be split among them, so
  the rows name every candidate with ``holders``), ``ambiguous`` (a holder could be more than
  one sample: two MIG devices of one profile on one GPU), ``no-holder`` (the GPU is sampled
  but no container holds it), ``unresolved`` (a container holds a GPU device that names no
  sample: a MIG UUID of the device plugin, a device without samples; ``gpu_uuid`` NULL).

Nothing is guessed: a sample is given to a pod only when the kubelet says that pod, and only
that pod, holds it.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import pyarrow as pa

from sits_observe.collectors.podresources.client import Holder
from sits_observe.domain.tables import GPU_ATTRIBUTION

_REPLICA = re.compile(r"::\d+$")
_DRA_GPU = re.compile(r"gpu-(\d+)(?:-mig-([a-z0-9]+)-\d+-\d+)?")
_SAMPLE_COLUMNS = (
    "ts",
    "node",
    "gpu_uuid",
    "gpu_index",
    "device",
    "mig_profile",
    "mig_instance_id",
    "namespace",
    "pod",
    "container",
    "fb_used_bytes",
    "gpu_util_ratio",
)


@dataclass(frozen=True)
class Attributed:
    """The tick's GPU samples with their pods filled, and the attribution rows."""

    gpu_samples: pa.Table
    attribution: pa.Table


def attribute(
    gpu_samples: pa.Table, holders: Sequence[Holder], *, now: datetime, node: str | None
) -> Attributed:
    """Join ``holders`` to ``gpu_samples`` (module docstring); ``now`` stamps the rows of
    holders that name no sample."""
    rows = _rows(gpu_samples)
    targets = [_targets(h, rows) for h in holders]
    by_row: dict[int, list[int]] = defaultdict(list)
    for k, found in enumerate(targets):
        for i in found:
            by_row[i].append(k)
    out: list[dict[str, Any]] = []
    fills: dict[int, tuple[str, str, str | None]] = {}
    for i, row in enumerate(rows):
        held = [holders[k] for k in by_row.get(i, [])]
        ambiguous = any(len(targets[k]) > 1 for k in by_row.get(i, []))
        pods = {(h.namespace, h.pod) for h in held}
        if not held:
            out.append(_row(row, None, "unattributed", "no-holder", holders=0, node=node))
            continue
        if ambiguous or len(pods) > 1:
            reason = "ambiguous" if ambiguous else "shared"
            out += [
                _row(row, h, "unattributed", reason, holders=len(held), node=node) for h in held
            ]
            continue
        out += [_row(row, h, "pod", None, holders=len(held), node=node) for h in held]
        containers = {h.container for h in held}
        ns, pod = next(iter(pods))
        fills[i] = (ns, pod, next(iter(containers)) if len(containers) == 1 else None)
    for k, found in enumerate(targets):
        if not found:
            out.append(
                _row({"ts": now}, holders[k], "unattributed", "unresolved", holders=1, node=node)
            )
    return Attributed(_filled(gpu_samples, fills), _table(out))


def _rows(table: pa.Table) -> list[dict[str, Any]]:
    present = [c for c in _SAMPLE_COLUMNS if c in table.column_names]
    rows: list[dict[str, Any]] = table.select(present).to_pylist()
    return rows


def _targets(holder: Holder, rows: list[dict[str, Any]]) -> list[int]:
    """The sample rows the holder's device names (module docstring)."""
    name = holder.device_name
    whole = [i for i, r in enumerate(rows) if r.get("mig_profile") is None]
    if holder.source == "device-plugin":
        base = _REPLICA.sub("", name)
        if base.startswith("GPU-"):
            return [i for i in whole if rows[i].get("gpu_uuid") == base]
        if base.isdigit():
            return [i for i in whole if rows[i].get("gpu_index") == int(base)]
        return []
    match = _DRA_GPU.fullmatch(name)
    if match is None:
        return []
    minor, profile = int(match.group(1)), match.group(2)
    uuids = {r.get("gpu_uuid") for r in rows if r.get("device") == f"nvidia{minor}"}
    if not uuids:  # no device label: the index is the minor on every driver we know of
        uuids = {r.get("gpu_uuid") for r in rows if r.get("gpu_index") == minor}
    uuids.discard(None)
    if profile is None:
        return [i for i in whole if rows[i].get("gpu_uuid") in uuids]
    return [
        i
        for i, r in enumerate(rows)
        if r.get("gpu_uuid") in uuids
        and str(r.get("mig_profile") or "").replace(".", "") == profile
    ]


def _row(
    sample: dict[str, Any],
    holder: Holder | None,
    bucket: str,
    reason: str | None,
    *,
    holders: int,
    node: str | None,
) -> dict[str, Any]:
    s = sample
    return {
        "ts": s.get("ts"),
        "node": s.get("node") or node,
        "gpu_uuid": s.get("gpu_uuid"),
        "mig_profile": s.get("mig_profile"),
        "mig_instance_id": s.get("mig_instance_id"),
        "bucket": bucket,
        "reason": reason,
        "holders": holders,
        "namespace": holder.namespace if holder else None,
        "pod": holder.pod if holder else None,
        "container": holder.container if holder else None,
        "source": holder.source if holder else None,
        "resource": holder.resource if holder else None,
        "device": holder.device if holder else None,
        "claim": holder.claim if holder else None,
        "share_id": holder.share_id if holder else None,
        "fb_used_bytes": s.get("fb_used_bytes"),
        "gpu_util_ratio": s.get("gpu_util_ratio"),
    }


def _filled(table: pa.Table, fills: dict[int, tuple[str, str, str | None]]) -> pa.Table:
    """``gpu_samples`` with the pods of ``fills`` set where the exporter named none."""
    if not fills or "pod" not in table.column_names:
        return table
    named = table.column("pod").to_pylist()
    for position, column in enumerate(("namespace", "pod", "container")):
        values = table.column(column).to_pylist()
        for i, fill in fills.items():
            if named[i] is None:
                values[i] = fill[position]
        index = table.schema.get_field_index(column)
        table = table.set_column(index, column, pa.array(values, pa.string()))
    return table


def _table(rows: list[dict[str, Any]]) -> pa.Table:
    return pa.Table.from_pylist(rows, schema=GPU_ATTRIBUTION.schema)
