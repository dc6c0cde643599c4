"""Value types shared by the cluster GPU fragmentation (FGD) modules.

The measure is the one of Weng et al., "Beware of Fragmentation: Scheduling GPU-Sharing
Workloads with Fragmentation Gradient Descent", USENIX ATC 2023 (docs/analytics/
fragmentation-fgd.md). Units: CPU and GPU amounts are *milli* (thousandths of a core or of a
whole GPU); a GPU has :data:`MILLI_PER_GPU` milli.

A :class:`PodShape` is one pod's request as the measure sees it: CPU, GPU count, the share of
each GPU, and the GPU models it may run on. Memory is not part of the measure (the paper and
its simulator score CPU and GPU only).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

#: Milli-GPU in one whole GPU (the trace's ``gpu_milli`` scale, 0-1000).
MILLI_PER_GPU = 1000


class Cause(StrEnum):
    """Why a typical pod cannot use a node's idle GPU milli (each contribution has one cause).

    - ``lack_gpu``: the pod's GPU request does not fit (too few GPUs with a large enough free
      share), or it fits and this is the part of the idle GPU milli on GPUs whose free share
      is smaller than the pod's per-GPU request;
    - ``lack_cpu``: the GPUs fit, the free CPU does not;
    - ``lack_both``: neither fits;
    - ``cpu_only``: the pod asks for no GPU, so no idle GPU milli is usable by it;
    - ``gpu_type``: the node's GPU model is not among the pod's allowed models.
    """

    lack_gpu = "lack_gpu"
    lack_cpu = "lack_cpu"
    lack_both = "lack_both"
    cpu_only = "cpu_only"
    gpu_type = "gpu_type"


#: Causes in report order; the index is the cause code used in the vectorised kernels.
CAUSES: tuple[Cause, ...] = tuple(Cause)


def normalise_gpu_types(spec: str | Iterable[str] | None) -> tuple[str, ...]:
    """Allowed GPU models as a sorted tuple without blanks or duplicates (empty = any model).

    Accepts the trace's ``|``-separated ``gpu_spec`` text or an iterable of names; ``"A|B"``
    and ``"B|A"`` are the same constraint.
    """
    if spec is None:
        return ()
    names = spec.split("|") if isinstance(spec, str) else list(spec)
    return tuple(sorted({name.strip() for name in names if name.strip()}))


@dataclass(frozen=True, order=True)
class PodShape:
    """One pod's request: ``num_gpu`` GPUs with ``gpu_milli`` each, plus ``cpu_milli``.

    ``gpu_milli`` is the per-GPU share (1-1000 when ``num_gpu`` > 0, 0 for a CPU-only pod);
    a partial share (< 1000) is only valid with ``num_gpu == 1``, as in the Alibaba trace.
    ``gpu_types`` lists the allowed GPU models (sorted; empty = any).
    """

    cpu_milli: int
    num_gpu: int
    gpu_milli: int
    gpu_types: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        problem = shape_problem(self.cpu_milli, self.num_gpu, self.gpu_milli)
        if problem:
            raise ValueError(f"invalid pod shape {self}: {problem}")
        if self.gpu_types != normalise_gpu_types(self.gpu_types):
            object.__setattr__(self, "gpu_types", normalise_gpu_types(self.gpu_types))

    @property
    def cpu_only(self) -> bool:
        """True when the pod asks for no GPU."""
        return self.num_gpu == 0

    @property
    def gpu_request_milli(self) -> int:
        """Total GPU milli the pod takes (``num_gpu * gpu_milli``)."""
        return self.num_gpu * self.gpu_milli

    def label(self) -> str:
        """A short human label, e.g. ``cpu 3.152 + 1x810m`` or ``cpu 8 + 2x1000m [V100M32]``."""
        text = f"cpu {self.cpu_milli / 1000:g}"
        if self.num_gpu:
            text += f" + {self.num_gpu}x{self.gpu_milli}m"
        if self.gpu_types:
            text += f" [{'|'.join(self.gpu_types)}]"
        return text


def shape_problem(cpu_milli: int, num_gpu: int, gpu_milli: int) -> str | None:
    """What is wrong with a request (None when valid); shared by the loaders and PodShape."""
    if cpu_milli < 0:
        return f"cpu_milli {cpu_milli} is negative"
    if num_gpu < 0:
        return f"num_gpu {num_gpu} is negative"
    if num_gpu == 0 and gpu_milli != 0:
        return f"gpu_milli {gpu_milli} with num_gpu 0 (a CPU-only pod has gpu_milli 0)"
    if num_gpu > 0 and not 1 <= gpu_milli <= MILLI_PER_GPU:
        return f"gpu_milli {gpu_milli} outside 1-{MILLI_PER_GPU} for a GPU pod"
    if num_gpu > 1 and gpu_milli != MILLI_PER_GPU:
        return f"num_gpu {num_gpu} with a partial share {gpu_milli} (partial only with 1 GPU)"
    return None
