"""Which Prometheus family carries which ``container_samples`` column, and under which labels.

Shared by the agent, which serves its latest cgroup samples on ``/metrics``
(:mod:`sits_observe.collectors.agent.latest`), and the PromQL source that reads them back
from a Prometheus-compatible store (:mod:`sits_observe.store.promql.source`), so the two
cannot disagree on names, units or labels (docs/scaling.md, "The agent's /metrics").

Names are cAdvisor's (google/cadvisor docs/storage/prometheus.md, as served by the kubelet's
``/metrics/cadvisor``) where cAdvisor measures the same cgroup v2 quantity, so stock
dashboards and alert rules read them:

- ``container_memory_usage_bytes`` is ``memory.current``; ``container_memory_rss`` and
  ``container_memory_cache`` are ``memory.stat`` ``anon`` and ``file`` (cAdvisor's own cgroup
  v2 mapping); ``container_memory_kernel_usage`` is ``memory.stat`` ``kernel``;
- ``container_spec_memory_limit_bytes`` is ``memory.max``, 0 when unlimited (cAdvisor's
  convention; read back as NULL);
- ``container_oom_events_total`` counts OOM *kills* (cAdvisor counts the kernel's OOM-kill
  events), so it carries ``memory.events`` ``oom_kill``;
- ``container_pressure_{memory,cpu}_waiting_seconds_total`` are the PSI ``some`` totals
  (kubelet 1.34's names, KEP-4205);
- CPU: ``container_cpu_usage_seconds_total``, ``container_cpu_cfs_throttled_seconds_total``,
  ``container_cpu_cfs_periods_total``, ``container_cpu_cfs_throttled_periods_total``.

``sits_`` names where cAdvisor has none: ``memory.events`` ``oom`` (the limit was hit, not
necessarily a kill), the PSI 10 s averages (ratios 0-1, not percent) and the CPU limit in
cores (cAdvisor splits it into quota and period). ``container_memory_working_set_bytes``
(usage minus ``inactive_file``) is not served: the agent does not read ``inactive_file``, and
a working set that is really ``memory.current`` would mislead every dashboard that reads it.

Labels: ``namespace``, ``pod``, ``container`` (cAdvisor's, as the kubelet sets them; empty
until the inventory names the container), plus ``node``, ``pod_uid``, ``container_id``,
``runtime`` and ``qos_class`` so that a row can be rebuilt whole. All are per container, so a
node serves one series per family per container cgroup (about 200 at the defaults): 17
families x 200 = 3,400 series per node.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ContainerFamily:
    """One ``container_samples`` column served as one Prometheus family (same unit).

    ``counter``: a cumulative value (``_total`` names); ``integer``: the column is an integer.
    ``zero_is_null``: the exposition writes NULL as 0 (cAdvisor's unlimited memory limit).
    """

    column: str
    name: str
    help: str
    counter: bool = False
    integer: bool = False
    zero_is_null: bool = False


FAMILIES: tuple[ContainerFamily, ...] = (
    ContainerFamily(
        "memory_current_bytes",
        "container_memory_usage_bytes",
        "memory.current, bytes",
        integer=True,
    ),
    ContainerFamily(
        "memory_max_bytes",
        "container_spec_memory_limit_bytes",
        "memory.max, bytes (0: unlimited)",
        integer=True,
        zero_is_null=True,
    ),
    ContainerFamily(
        "memory_anon_bytes", "container_memory_rss", "memory.stat anon, bytes", integer=True
    ),
    ContainerFamily(
        "memory_file_bytes", "container_memory_cache", "memory.stat file, bytes", integer=True
    ),
    ContainerFamily(
        "memory_kernel_bytes",
        "container_memory_kernel_usage",
        "memory.stat kernel, bytes",
        integer=True,
    ),
    ContainerFamily(
        "oom_kill_events_total",
        "container_oom_events_total",
        "memory.events oom_kill",
        counter=True,
        integer=True,
    ),
    ContainerFamily(
        "oom_events_total",
        "sits_container_memory_oom_events_total",
        "memory.events oom (memory.max reached)",
        counter=True,
        integer=True,
    ),
    ContainerFamily(
        "memory_pressure_some_avg10_ratio",
        "sits_container_memory_pressure_some_avg10_ratio",
        "memory.pressure some avg10, 0-1",
    ),
    ContainerFamily(
        "memory_pressure_full_avg10_ratio",
        "sits_container_memory_pressure_full_avg10_ratio",
        "memory.pressure full avg10, 0-1",
    ),
    ContainerFamily(
        "memory_pressure_some_total_s",
        "container_pressure_memory_waiting_seconds_total",
        "memory.pressure some total, seconds",
        counter=True,
    ),
    ContainerFamily(
        "cpu_pressure_some_avg10_ratio",
        "sits_container_cpu_pressure_some_avg10_ratio",
        "cpu.pressure some avg10, 0-1",
    ),
    ContainerFamily(
        "cpu_pressure_some_total_s",
        "container_pressure_cpu_waiting_seconds_total",
        "cpu.pressure some total, seconds",
        counter=True,
    ),
    ContainerFamily(
        "cpu_usage_s",
        "container_cpu_usage_seconds_total",
        "cpu.stat usage_usec, seconds",
        counter=True,
    ),
    ContainerFamily(
        "cpu_throttled_s",
        "container_cpu_cfs_throttled_seconds_total",
        "cpu.stat throttled_usec, seconds",
        counter=True,
    ),
    ContainerFamily(
        "cpu_periods_total",
        "container_cpu_cfs_periods_total",
        "cpu.stat nr_periods",
        counter=True,
        integer=True,
    ),
    ContainerFamily(
        "cpu_throttled_periods_total",
        "container_cpu_cfs_throttled_periods_total",
        "cpu.stat nr_throttled",
        counter=True,
        integer=True,
    ),
    ContainerFamily(
        "cpu_limit_cores",
        "sits_container_cpu_limit_cores",
        "cpu.max quota / period, cores",
    ),
)

#: Prometheus label <- ``container_samples`` identity column.
LABELS: tuple[tuple[str, str], ...] = (
    ("node", "node"),
    ("namespace", "namespace"),
    ("pod", "pod"),
    ("container", "container"),
    ("pod_uid", "pod_uid"),
    ("container_id", "container_id"),
    ("runtime", "runtime"),
    ("qos_class", "qos_class"),
)
