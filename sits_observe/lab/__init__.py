"""The scheduling lab: a simulated GPU cluster, the kube-scheduler model, the replay, the
experiment and the demo's wiring.

The lab may import the product; the product never imports the lab (an import-linter
contract). Only the entry points that offer lab commands (the CLI's ``demo``, ``experiment``,
``simulate`` and ``whatif``, and the Streamlit pages that show them) reach into it. The
placement rules the extender runs in production live in the product
(:mod:`sits_observe.analytics.placement`), and the lab calls them, so a replay or an
experiment always measures the shipped code.

- :mod:`.cluster`: simulated nodes (DCGM text, cgroup files, kubelets, inference servers) on a
  simulated clock;
- :mod:`.kube`: the Kubernetes API emulator the simulated cluster and the controller talk to;
- :mod:`.scheduler`: a model of kube-scheduler that calls the extender over HTTP;
- :mod:`.replay`: trace replays under placement policies, and the ``whatif`` report;
- :mod:`.experiment`: the same seeded workload under each arm, measured;
- :mod:`.demo`: the demo's composition root.
"""
