"""The exporter's per-signal builders: each takes one pass's inputs and returns metric families.

- :mod:`.requests`: request latency, collectors and the controller;
- :mod:`.cluster`: fragmentation, GPUs, quotas and pod start;
- :mod:`.slow`: the slow signals (heatmap, workload classes, trends), computed in the
  background;
- :mod:`.idle`: idle, oversized and stranded GPUs;
- :mod:`.dra`: DRA fragmentation per node (memory slices, shares, first fit's waste);
- :mod:`.labels`: dcgm-exporter's label names for node and GPU series.

None holds SQL or calls an analysis: they read what the reports answer (an import-linter
contract keeps analytics, the store and control out of this package).
"""
