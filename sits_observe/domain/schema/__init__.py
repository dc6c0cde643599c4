"""How the sample tables are declared, the topology and DRA tables, and which exporter family
fills which column (dcgm-exporter, cAdvisor/kubelet)."""
