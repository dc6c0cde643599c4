"""A real VictoriaMetrics scraping the agent's /metrics stores its GPU samples.

The agent's registry is served the way ``sits-observe agent --metrics-port`` serves it
(prometheus-client's HTTP server on loopback); VictoriaMetrics' built-in scraper
(``-promscrape.config``) scrapes it every second; the PromQL source then reads back the same
rows, with the agent's own sample times.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import polars as pl
from prometheus_client import start_http_server

from sits_observe.collectors.agent import AgentMetrics
from sits_observe.collectors.dcgm import parse_dcgm
from sits_observe.lab.cluster.cluster import SimulatedCluster
from sits_observe.lab.cluster.render import dcgm_text
from sits_observe.store.promql.client import PromQLClient
from sits_observe.store.promql.source import PromQLGpuSource
from tests.integration.promql_support import VictoriaMetrics, free_port


def test_victoria_metrics_scrapes_the_agent(tmp_path: Path) -> None:
    cluster = SimulatedCluster(nodes=1, gpus_per_node=8, seed=9)
    cluster.step(60)
    at = datetime.now(UTC).replace(tzinfo=None, microsecond=123_000) - timedelta(seconds=5)
    node = sorted(cluster.nodes)[0]
    rows = parse_dcgm(dcgm_text(cluster, node), now=at, node=None).tables["gpu_samples"]
    metrics = AgentMetrics()
    metrics.latest.publish({"gpu_samples": rows})
    port = free_port()
    server, thread = start_http_server(port, addr="127.0.0.1", registry=metrics.registry)
    config = tmp_path / "scrape.yml"
    config.write_text(
        "scrape_configs:\n"
        "  - job_name: sits-agent\n"
        "    scrape_interval: 1s\n"
        "    honor_timestamps: true\n"
        f"    static_configs: [{{targets: ['127.0.0.1:{port}']}}]\n"
    )
    vm = VictoriaMetrics(tmp_path / "vm", scrape_config=config)
    client = PromQLClient(vm.base)
    try:
        deadline = time.monotonic() + 60
        table = None
        while time.monotonic() < deadline:
            vm.client.get(f"{vm.base}/internal/force_flush")
            table = PromQLGpuSource(client, matchers='job="sits-agent"').gpu_samples(
                at - timedelta(minutes=1), at + timedelta(minutes=1), columns=["fb_used_bytes"]
            )
            if table.num_rows >= 8:
                break
            time.sleep(0.5)
        assert table is not None and table.num_rows == 8, "VictoriaMetrics never stored them"
        got = pl.from_arrow(table.select(["ts", "gpu_uuid", "node", "fb_used_bytes"]))
        want = pl.from_arrow(rows.select(["ts", "gpu_uuid", "node", "fb_used_bytes"]))
        assert isinstance(got, pl.DataFrame) and isinstance(want, pl.DataFrame)
        assert got.sort("gpu_uuid").equals(want.sort("gpu_uuid"))
        assert set(got["ts"].to_list()) == {at}  # the agent's time, not the scrape time
    finally:
        client.close()
        vm.stop()
        server.shutdown()
        thread.join(timeout=5)
