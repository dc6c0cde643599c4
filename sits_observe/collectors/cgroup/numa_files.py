"""Parsers of the kernel's NUMA and PCI topology files (sysfs and cgroup v2).

Formats (Linux Documentation/admin-guide/numastat.rst, cgroup-v2.rst, ABI sysfs-bus-pci):

- ``/sys/devices/system/node/node<N>/numastat``: one ``key value`` line per counter, values
  in pages since boot: ``numa_hit`` (allocated on the intended node), ``numa_miss``
  (allocated here though another node was intended), ``numa_foreign`` (intended here,
  allocated elsewhere), ``interleave_hit``, ``local_node`` (allocated here by a process running
  here), ``other_node`` (allocated here by a process on another node).
- cgroup v2 ``memory.numa_stat``: one line per memory type, ``anon N0=<bytes> N1=<bytes> ...``.
- ``/sys/bus/pci/devices/<domain:bus:dev.fn>/numa_node``: the device's NUMA node, ``-1`` when
  the platform reports none (a single-node machine, or firmware without the information).
- ``local_cpulist`` (and ``/sys/devices/system/node/node<N>/cpulist``): a CPU list such as
  ``0-23,48-71``.

Every parser raises :class:`~sits_observe.errors.ParseError` naming the bad text; the
collectors count it and carry on.
"""

from __future__ import annotations

from sits_observe.errors import ParseError

#: The counters of a ``numastat`` file, in the kernel's order.
NUMASTAT_KEYS = (
    "numa_hit",
    "numa_miss",
    "numa_foreign",
    "interleave_hit",
    "local_node",
    "other_node",
)


def _uint(text: str, where: str) -> int:
    if not text.isdigit():
        raise ParseError(f"{where}: {text!r} is not an unsigned integer")
    return int(text)


def parse_numastat(text: str) -> dict[str, int]:
    """The counters (pages) of a ``numastat`` file; all six keys must be present.

    Keys the kernel may add later are ignored, so a newer kernel does not break the read.
    """
    values: dict[str, int] = {}
    for line in text.splitlines():
        key, _, value = line.strip().partition(" ")
        if key in NUMASTAT_KEYS:
            values[key] = _uint(value.strip(), f"numastat {key}")
    missing = [k for k in NUMASTAT_KEYS if k not in values]
    if missing:
        raise ParseError(
            f"numastat lacks {', '.join(missing)}; expected {', '.join(NUMASTAT_KEYS)}"
        )
    return values


def parse_numa_stat(text: str) -> dict[str, dict[int, int]]:
    """``{memory type: {NUMA node: bytes}}`` of a cgroup v2 ``memory.numa_stat`` file."""
    out: dict[str, dict[int, int]] = {}
    for line in text.splitlines():
        fields = line.split()
        if not fields:
            continue
        key, per_node = fields[0], fields[1:]
        nodes: dict[int, int] = {}
        for item in per_node:
            name, sep, value = item.partition("=")
            if not sep or not name.startswith("N"):
                raise ParseError(f"memory.numa_stat {key}: {item!r} is not N<node>=<bytes>")
            nodes[_uint(name[1:], f"memory.numa_stat {key}")] = _uint(
                value, f"memory.numa_stat {key}"
            )
        out[key] = nodes
    return out


def parse_numa_node(text: str) -> int | None:
    """A PCI device's ``numa_node``; None for ``-1`` (no NUMA information)."""
    value = text.strip()
    if value == "-1":
        return None
    return _uint(value, "numa_node")


def parse_cpulist(text: str) -> tuple[int, ...]:
    """The CPUs of a list such as ``0-3,8,10-11`` (an empty list is no CPU), sorted."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        if not part:
            continue
        lo, sep, hi = part.partition("-")
        first = _uint(lo, "cpulist")
        last = _uint(hi, "cpulist") if sep else first
        if last < first:
            raise ParseError(f"cpulist: range {part!r} runs backwards")
        cpus.update(range(first, last + 1))
    return tuple(sorted(cpus))


def format_cpulist(cpus: tuple[int, ...]) -> str:
    """The kernel's compact form of ``cpus`` (sorted, distinct): ``0-3,8``."""
    ranges: list[str] = []
    start = prev = None
    for cpu in cpus:
        if prev is not None and cpu == prev + 1:
            prev = cpu
            continue
        if start is not None:
            ranges.append(str(start) if start == prev else f"{start}-{prev}")
        start = prev = cpu
    if start is not None:
        ranges.append(str(start) if start == prev else f"{start}-{prev}")
    return ",".join(ranges)


def cpus_of_mask(words: list[int], word_bits: int = 64) -> tuple[int, ...]:
    """The CPUs set in an affinity bit mask given as words, lowest CPU in word 0 bit 0 (NVML's
    ``nvmlDeviceGetCpuAffinity`` layout)."""
    return tuple(
        w * word_bits + bit
        for w, word in enumerate(words)
        for bit in range(word_bits)
        if word >> bit & 1
    )


def sysfs_bus_id(nvml_bus_id: str) -> str:
    """NVML's ``00000000:18:00.0`` (32-bit domain) as sysfs names it: ``0000:18:00.0``."""
    domain, sep, rest = nvml_bus_id.strip().partition(":")
    if not sep or not domain:
        raise ParseError(f"PCI bus id {nvml_bus_id!r}: expected domain:bus:device.function")
    try:
        number = int(domain, 16)
    except ValueError:
        raise ParseError(f"PCI bus id {nvml_bus_id!r}: domain {domain!r} is not hex") from None
    return f"{number:04x}:{rest.lower()}"
