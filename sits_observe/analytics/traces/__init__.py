"""Public cluster traces as typed tables: the Alibaba GPU trace (nodes and pods), its workload
variants, and the GenAI trace's per-container telemetry."""
