"""Label names of the exporter's node and GPU series: dcgm-exporter's own.

dcgm-exporter labels every ``DCGM_FI_*`` series with ``Hostname`` (the node), ``gpu`` (the
device's index on its node, ``"0"``, ``"1"`` ...), ``UUID`` (``GPU-...``) and ``modelName``
(``NVIDIA H100 80GB HBM3``) (dcgm-exporter's ``pkg/dcgmexporter``, the labels of every
metric; NVIDIA's Grafana dashboard 12239 groups by them). The exporter uses the same names,
so a sits series joins a DCGM one without relabelling:
``sits_gpu_idle_ratio * on (UUID) group_left () DCGM_FI_DEV_POWER_USAGE`` or
``on (Hostname, gpu)``. Series about a node carry ``Hostname`` alone.

Index and model name are not part of the analyses' results (they key GPUs by UUID); they are
looked up once per pass and window: the newest known index and model of each UUID in
``gpu_samples`` (:func:`sits_observe.reports.inventory.names.gpu_identities`, the same answer the
reports' GPU labels use; :class:`GpuNames`). A GPU with no such row is labelled ``unknown``
for both.
"""

from __future__ import annotations

import pyarrow as pa

#: The node (dcgm-exporter: the node name when NODE_NAME is set, as its Helm chart and the
#: GPU Operator do).
NODE = "Hostname"
#: The GPU's index on its node, as text.
GPU_INDEX = "gpu"
#: The GPU's UUID (``GPU-...``); for a MIG instance, its parent GPU's.
GPU_UUID = "UUID"
#: The GPU's product name as the driver reports it.
MODEL = "modelName"
#: Every per-GPU series starts with these four labels, in this order.
GPU_LABELS: tuple[str, ...] = (NODE, GPU_INDEX, GPU_UUID, MODEL)


def _text(value: object, unknown: str) -> str:
    return str(value) if value not in (None, "") else unknown


class GpuNames:
    """Index and model name of each GPU UUID of ``identities`` (the rows of
    :func:`~sits_observe.reports.inventory.names.gpu_identities` for one window)."""

    def __init__(self, identities: pa.Table, *, unknown: str) -> None:
        self._unknown = unknown
        self._names: dict[str, tuple[str, str]] = {
            str(row["gpu_uuid"]): (
                _text(row["gpu_index"], unknown),
                _text(row["model_name"], unknown),
            )
            for row in identities.to_pylist()
        }

    def labels(self, node: str, uuid: str) -> tuple[str, str, str, str]:
        """The values of :data:`GPU_LABELS` for the GPU ``uuid`` of ``node`` (both already
        label values: ``unknown`` for NULL)."""
        index, model = self._names.get(uuid, (self._unknown, self._unknown))
        return (node, index, uuid, model)
