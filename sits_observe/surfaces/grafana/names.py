"""The metric and label names the dashboards query: one constant per family, as ``serve``
(and, for ``DCGM_FI_*``, dcgm-exporter) exports it.

Every PromQL expression of every generated panel is built from these constants (see
:mod:`.promql`), never typed inline, so a renamed metric is a one-line change here and the
unit test ``tests/unit/surfaces/test_grafana.py`` fails when a constant names a series the
service does not export. Names follow docs/metrics.md: ``sits_`` prefix, base units,
``_ratio`` for 0-1 fractions, ``_total`` on counter samples. Counter constants carry the
``_total`` suffix (the sample name PromQL sees); the GaugeHistogram carries its three series.

Node and GPU labels are dcgm-exporter's (``Hostname``, ``gpu`` = the index, ``UUID``,
``modelName``; :mod:`sits_observe.surfaces.service.exporter.signals.labels`), so a panel
joins a sits series with a ``DCGM_FI_*`` one on them; the unit test checks the two modules
agree. The ``DCGM_FI_*`` fields a panel reads must be in ``collectors/dcgm-counters.csv``
(tested too).
"""

from __future__ import annotations

# -- labels -------------------------------------------------------------------------------------
#: The Kubernetes cluster, from Prometheus (an external label, or a relabeling of the scrape):
#: every query is scoped by the dashboards' ``cluster`` variable (:func:`.promql.scoped`).
CLUSTER_LABEL = "cluster"
NODE_LABEL = "Hostname"
GPU_INDEX_LABEL = "gpu"
GPU_UUID_LABEL = "UUID"
MODEL_LABEL = "modelName"
#: What identifies one physical GPU across clusters, on sits and DCGM series alike.
GPU_KEY: tuple[str, ...] = (CLUSTER_LABEL, NODE_LABEL, GPU_INDEX_LABEL, GPU_UUID_LABEL)

# -- latency and throughput (per model) -------------------------------------------------------
LATENCY = "sits_latency_seconds"
LATENCY_ESTIMATE = "sits_latency_estimate_seconds"
LATENCY_SLO = "sits_latency_slo_seconds"
THROUGHPUT = "sits_requests_per_second"
KNEE = "sits_knee_requests_per_second"
SAFE_MAX = "sits_safe_max_requests_per_second"
WINDOW_LATENCY = "sits_request_latency_window_seconds"
WINDOW_LATENCY_BUCKET = f"{WINDOW_LATENCY}_bucket"
WINDOW_LATENCY_COUNT = f"{WINDOW_LATENCY}_gcount"
WINDOW_LATENCY_SUM = f"{WINDOW_LATENCY}_gsum"

# -- fragmentation ------------------------------------------------------------------------------
FGD_RATIO = "sits_fgd_fragmentation_ratio"
FGD_AMOUNT_RATIO = "sits_fgd_fragmentation_amount_ratio"
FGD_NODE_GPUS = "sits_fgd_node_fragmentation_gpus"
SMF_GPU = "sits_smf_ratio"
SMF_NODE = "sits_smf_node_ratio"
SMF_NAMESPACE = "sits_smf_namespace_ratio"
FB_USED = "sits_gpu_framebuffer_used_ratio"
DRA_SLICES_FREE = "sits_dra_memory_slices_free"
DRA_SLICES_STRANDED = "sits_dra_memory_slices_stranded"
DRA_FIRST_FIT_WASTE = "sits_dra_first_fit_wasted_slices"
DRA_SHARED_FREE_BYTES = "sits_dra_shared_free_bytes"
DRA_SHARED_STRANDED_BYTES = "sits_dra_shared_stranded_bytes"
TREND_CLUSTER = "sits_gpu_trend_cluster"

# -- attribution: which pod / MIG instance holds each GPU ---------------------------------------
FB_USED_BYTES = "sits_gpu_framebuffer_used_bytes"
SHARED_PODS = "sits_gpu_shared_pods"

# -- idle, oversized and stranded GPUs ----------------------------------------------------------
IDLE_GPUS = "sits_gpu_idle_gpus"
IDLE_WASTED_GPU_HOURS = "sits_gpu_idle_wasted_gpu_hours"
IDLE_RATIO = "sits_gpu_idle_ratio"

# -- workloads, interference, quotas ------------------------------------------------------------
INTERFERENCE = "sits_interference_score_ratio"
MEMORY_CLASS = "sits_memory_class_workloads"
QUOTA = "sits_quota"
POD_START = "sits_pod_start_seconds"

# -- controller ---------------------------------------------------------------------------------
DECISIONS = "sits_controller_decisions_total"
CONTROLLER_ERRORS = "sits_controller_errors_total"
LAST_DECISION = "sits_controller_last_decision_timestamp_seconds"

# -- health of the pipeline ---------------------------------------------------------------------
COLLECTOR_DROPS = "sits_collector_drops_total"
LAST_SEEN = "sits_collector_last_seen_timestamp_seconds"
EXPORTER_ERRORS = "sits_exporter_errors_total"
INGEST_ROWS = "sits_ingest_rows_total"
INGEST_BATCHES = "sits_ingest_batches_total"
STORE_ROWS = "sits_store_rows"
HTTP_DURATION_BUCKET = "sits_http_request_duration_seconds_bucket"

# -- dcgm-exporter (collectors/dcgm-counters.csv; units as dcgm-exporter exports them) ---------
DCGM_GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"  # percent
DCGM_SM_ACTIVE = "DCGM_FI_PROF_SM_ACTIVE"  # ratio 0-1 (profiling metrics, datacenter GPUs)
DCGM_POWER = "DCGM_FI_DEV_POWER_USAGE"  # watts
DCGM_GPU_TEMP = "DCGM_FI_DEV_GPU_TEMP"  # degrees Celsius
DCGM_XID = "DCGM_FI_DEV_XID_ERRORS"  # the code of the last XID error, 0 = none
