"""Where work runs on the hardware: GPU links, NUMA placement, the interference score and the
TopologyManager advice, device affinity and placement by GPU product and precision."""
