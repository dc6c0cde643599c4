"""The GPU hardware row: dcgm-exporter's own per-GPU series next to sits's signals.

The panels users know from NVIDIA's dcgm-exporter dashboard (Grafana 12239: utilisation,
power, temperature; plus SM activity and the last XID error) read the ``DCGM_FI_*`` series
of the dcgm-exporter the agents already read (``collectors/dcgm-counters.csv`` lists every
field used here), and two panels join them with sits series on the GPU's identity
(:data:`.names.GPU_KEY`: cluster, ``Hostname``, ``gpu``, ``UUID``, the labels both exporters
share). Several DCGM series may describe one GPU (a pod's labels that changed within the
range, MIG instances, an exporter pod that restarted), so each is reduced with ``max by``
the GPU's identity first.
"""

from __future__ import annotations

from sits_observe.surfaces.grafana import names as m
from sits_observe.surfaces.grafana.panels import Panel, Query, stat, table, timeseries
from sits_observe.surfaces.grafana.promql import NODE, agg, sel

#: The GPU's identity and its product name: one row or line per physical GPU.
_GPU = (*m.GPU_KEY, m.MODEL_LABEL)
_LEGEND = "{{Hostname}}/{{gpu}} {{modelName}}"
#: Share of the window a held GPU must have been idle to count its power as wasted: the
#: idle rule's own floor for an idle holding (docs/analytics/rightsizing.md, 90 %).
IDLE_SHARE_MIN = 0.9


def per_gpu(metric: str) -> str:
    """``metric`` of the selected nodes, one series per physical GPU."""
    return agg("max", _GPU, sel(metric, Hostname=NODE))


def hardware() -> tuple[Panel, ...]:
    """dcgm-exporter's per-GPU utilisation, SM activity, power, temperature and XID errors,
    and sits's idle share joined with them."""
    key = ", ".join(m.GPU_KEY)
    idle_held = f"{agg('max', m.GPU_KEY, sel(m.IDLE_RATIO, Hostname=NODE))} >= {IDLE_SHARE_MIN}"
    power = agg("max", m.GPU_KEY, sel(m.DCGM_POWER, Hostname=NODE))
    return (
        timeseries(
            "GPU utilisation (dcgm-exporter)",
            "Share of time one or more kernels ran on each GPU (DCGM_FI_DEV_GPU_UTIL, %).",
            Query(per_gpu(m.DCGM_GPU_UTIL), legend=_LEGEND),
            unit="percent",
            minimum=0,
            maximum=100,
        ),
        timeseries(
            "SM activity (dcgm-exporter)",
            "Share of cycles an SM had a warp assigned (DCGM_FI_PROF_SM_ACTIVE; a profiling "
            "field: datacenter GPUs only).",
            Query(per_gpu(m.DCGM_SM_ACTIVE), legend=_LEGEND),
            unit="percentunit",
            minimum=0,
            maximum=1,
        ),
        timeseries(
            "Power draw (dcgm-exporter)",
            "Board power of each GPU (DCGM_FI_DEV_POWER_USAGE, W).",
            Query(per_gpu(m.DCGM_POWER), legend=_LEGEND),
            unit="watt",
            minimum=0,
        ),
        timeseries(
            "GPU temperature (dcgm-exporter)",
            "GPU die temperature (DCGM_FI_DEV_GPU_TEMP, degrees C).",
            Query(per_gpu(m.DCGM_GPU_TEMP), legend=_LEGEND),
            unit="celsius",
        ),
        stat(
            "GPUs with an XID error",
            "GPUs whose last XID error code is not 0 (DCGM_FI_DEV_XID_ERRORS); the table "
            "beside names the code (NVIDIA's XID catalogue says what each means).",
            Query(f"count({per_gpu(m.DCGM_XID)} > 0) or vector(0)", legend="GPUs"),
            unit="short",
            thresholds=((None, "green"), (1, "red")),
            minimum=0,
            width=6,
            height=8,
        ),
        table(
            "Last XID error per GPU",
            "The code of each GPU's last XID error (0 = none), GPUs with an error first.",
            Query(f"sort_desc({per_gpu(m.DCGM_XID)})", instant=True, fmt="table"),
            unit="none",
            width=18,
        ),
        stat(
            "Power drawn by GPUs held idle",
            f"Board power (dcgm-exporter) of the GPUs whose holders left them idle in at least "
            f"{IDLE_SHARE_MIN:.0%} of the idle window (sits_gpu_idle_ratio): joined on the "
            "GPU's cluster, Hostname, gpu and UUID.",
            Query(f"sum({power} and on ({key}) ({idle_held})) or vector(0)", legend="W"),
            unit="watt",
            minimum=0,
            width=6,
            height=8,
        ),
        table(
            "Held GPUs: idle share, utilisation and power",
            "sits's idle share of each held GPU next to dcgm-exporter's utilisation and power "
            "of the same GPU, merged on the labels both exporters give it.",
            Query(agg("max", _GPU, sel(m.IDLE_RATIO, Hostname=NODE)), instant=True, fmt="table"),
            Query(per_gpu(m.DCGM_GPU_UTIL), instant=True, fmt="table"),
            Query(per_gpu(m.DCGM_POWER), instant=True, fmt="table"),
            unit="none",
            transformations=(
                {"id": "merge", "options": {}},
                {
                    "id": "organize",
                    "options": {
                        "excludeByName": {"Time": True},
                        "renameByName": {
                            "Value #A": "idle share",
                            "Value #B": "utilisation %",
                            "Value #C": "power W",
                        },
                    },
                },
            ),
            width=18,
            height=8,
        ),
    )
