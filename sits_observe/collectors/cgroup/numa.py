"""The NUMA collector: the node's NUMA allocation counters and each container's placement.

Two tables per read (formats in :mod:`.numa_files`; docs/collectors/topology.md):

- ``numa_samples``: one row per NUMA node of the machine from
  ``<sys_root>/devices/system/node/node<N>/numastat``, the six counters as read (pages since
  boot, ``*_pages_total``). The miss ratio is a rate, so it is computed downstream from two
  reads (:mod:`sits_observe.analytics.topology.numa`): delta ``numa_miss`` / delta (``numa_hit`` +
  ``numa_miss``); storing the counters keeps that exact over any window and across a lost read.
- ``container_numa_samples``: one row per container cgroup and NUMA node from cgroup v2
  ``memory.numa_stat`` (anonymous and file-backed bytes on that node): where a container's
  memory actually lies, the evidence behind a TopologyManager ``single-numa-node`` advice.

Roots are injectable (``sys_root`` = the host's ``/sys``, ``cgroup_root`` = its cgroup v2 mount)
so tests read trees written to disk. Fault policy as in :mod:`.cgroup`: an absent
``memory.numa_stat`` (the container exited meanwhile, or its memory controller is off) is
counted as ``numa:missing:memory.numa_stat``, a malformed file as
``numa:malformed:<file>``; a machine without ``/sys/devices/system/node`` (no NUMA support
compiled in) raises :class:`~sits_observe.errors.CollectorError` once per read, which the agent
counts and isolates. A missing cgroup root only leaves the container table empty (counted
``numa:no_cgroup_root``; one without a kubelet hierarchy ``numa:no_kubepods``): the node
counters are still worth having. Only the kubelet's hierarchies are walked.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pyarrow as pa

from sits_observe.collectors.cgroup.collector import NotRegularFile, read_cgroup_file
from sits_observe.collectors.cgroup.numa_files import NUMASTAT_KEYS, parse_numa_stat, parse_numastat
from sits_observe.collectors.cgroup.paths import kubepods_dir, parse_cgroup_path
from sits_observe.domain.collect import CollectResult
from sits_observe.domain.schema.topology_tables import CONTAINER_NUMA_SAMPLES, NUMA_SAMPLES
from sits_observe.domain.times import utc_naive
from sits_observe.errors import CollectorError, ParseError

_NODE_DIR = re.compile(r"node(\d+)")
#: memory.numa_stat memory types kept (bytes per NUMA node) -> column.
NUMA_STAT_COLUMNS = {"anon": "anon_bytes", "file": "file_bytes"}


class NumaCollector:
    """Reads ``numastat`` of every NUMA node and ``memory.numa_stat`` of every container."""

    name = "numa"

    def __init__(
        self,
        *,
        node: str,
        sys_root: str | Path = "/sys",
        cgroup_root: str | Path | None = "/sys/fs/cgroup",
    ) -> None:
        """``cgroup_root`` None skips the per-container placement."""
        self.node = node
        self.sys_root = Path(sys_root)
        self.cgroup_root = None if cgroup_root is None else Path(cgroup_root)

    def collect(self, now: datetime) -> CollectResult:
        """Read every NUMA node and container once; ``now`` (UTC) stamps every row."""
        dropped: Counter[str] = Counter()
        nodes = self._numastat(dropped)
        containers = self._containers(dropped) if self.cgroup_root is not None else []
        at = utc_naive(now)
        for row in (*nodes, *containers):
            row.update(ts=at, node=self.node)
        return CollectResult(
            {
                NUMA_SAMPLES.name: _table(NUMA_SAMPLES.schema, nodes),
                CONTAINER_NUMA_SAMPLES.name: _table(CONTAINER_NUMA_SAMPLES.schema, containers),
            },
            dropped,
        )

    def _numastat(self, dropped: Counter[str]) -> list[dict[str, object]]:
        base = self.sys_root / "devices" / "system" / "node"
        try:
            names = sorted(os.listdir(base))
        except OSError as exc:
            raise CollectorError(
                f"cannot list {base}: {exc}; a kernel without NUMA support has no NUMA "
                "counters (pass the host's /sys as the sys root)"
            ) from exc
        rows: list[dict[str, object]] = []
        for name in names:
            match = _NODE_DIR.fullmatch(name)
            if match is None:
                continue
            try:
                values = parse_numastat((base / name / "numastat").read_text(encoding="ascii"))
            except (OSError, UnicodeDecodeError):
                dropped["numa:unreadable:numastat"] += 1
                continue
            except ParseError:
                dropped["numa:malformed:numastat"] += 1
                continue
            row: dict[str, object] = {"numa_node": int(match.group(1))}
            row.update({f"{key}_pages_total": values[key] for key in NUMASTAT_KEYS})
            rows.append(row)
        return rows

    def _containers(self, dropped: Counter[str]) -> list[dict[str, object]]:
        assert self.cgroup_root is not None
        root = str(self.cgroup_root)
        if not os.path.isdir(root):
            dropped["numa:no_cgroup_root"] += 1
            return []
        rows: list[dict[str, object]] = []
        for path, dirs, _ in _kubepods_walk(root, dropped):
            identity = parse_cgroup_path(os.path.relpath(path, os.path.dirname(root)))
            if identity is None:
                continue
            dirs.clear()  # a container's own cgroup: nothing below it is another container
            try:
                stat = parse_numa_stat(read_cgroup_file(os.path.join(path, "memory.numa_stat")))
            except FileNotFoundError:
                dropped["numa:missing:memory.numa_stat"] += 1
                continue
            except (OSError, NotRegularFile, UnicodeDecodeError):
                dropped["numa:unreadable:memory.numa_stat"] += 1
                continue
            except ParseError:
                dropped["numa:malformed:memory.numa_stat"] += 1
                continue
            numa_nodes = sorted({n for key in NUMA_STAT_COLUMNS for n in stat.get(key, {})})
            for numa_node in numa_nodes:
                row: dict[str, object] = {
                    "pod_uid": identity.pod_uid,
                    "container_id": identity.container_id,
                    "numa_node": numa_node,
                }
                for key, column in NUMA_STAT_COLUMNS.items():
                    row[column] = stat.get(key, {}).get(numa_node)
                rows.append(row)
        return rows


def _kubepods_walk(root: str, dropped: Counter[str]) -> Iterator[tuple[str, list[str], list[str]]]:
    """``os.walk`` of the kubelet's hierarchies only (``root`` itself, or its ``kubepods*``
    children): the rest of a host's cgroup tree (system.slice ...) holds no container."""
    if kubepods_dir(os.path.basename(root.rstrip(os.sep))) is not None:
        tops = [root]
    else:
        tops = [os.path.join(root, n) for n in sorted(os.listdir(root)) if kubepods_dir(n)]
    if not tops:
        dropped["numa:no_kubepods"] += 1
    for top in tops:
        yield from os.walk(top)


def _table(schema: pa.Schema, rows: list[dict[str, object]]) -> pa.Table:
    columns = {f.name: [row.get(f.name) for row in rows] for f in schema}
    return pa.Table.from_pydict(columns, schema=schema)
