"""Loopback HTTP endpoints of one simulated node.

Each node gets one HTTP server on 127.0.0.1 (a free port) that answers like the node's
exporters would: ``/metrics`` is the node's dcgm-exporter, and ``/vllm/<pod>/metrics`` is the
``/metrics`` of each vLLM pod on the node. Bodies are rendered from the cluster model on every
request, so a scrape sees the state at that moment.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from sits_observe.lab.cluster.cluster import SimulatedCluster
from sits_observe.lab.cluster.render import dcgm_text, vllm_text

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def _handler(route: Callable[[str], str | None]) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = route(self.path.split("?", 1)[0])
            if body is None:
                self.send_error(404, "no such exporter on this simulated node")
                return
            data = body.encode()
            self.send_response(200)
            self.send_header("Content-Type", CONTENT_TYPE)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: object) -> None:
            """Scrapes are frequent; keep the console for the demo's progress."""

    return Handler


class NodeEndpoints:
    """The exporters of one simulated node, served on loopback."""

    def __init__(self, cluster: SimulatedCluster, node: str, host: str = "127.0.0.1") -> None:
        self.cluster = cluster
        self.node = node
        self._server = ThreadingHTTPServer((host, 0), _handler(self._route))
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, name=f"sim-endpoints-{node}", daemon=True
        )

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    @property
    def dcgm_url(self) -> str:
        """The node's dcgm-exporter ``/metrics``."""
        return f"{self.base_url}/metrics"

    def vllm_urls(self) -> dict[str, str]:
        """Pod name -> the vLLM ``/metrics`` URL of each inference pod on the node."""
        with self.cluster.lock():
            pods = self.cluster.nodes[self.node].pods.values()
            return {p.name: f"{self.base_url}/vllm/{p.name}/metrics" for p in pods if p.server}

    def _route(self, path: str) -> str | None:
        if path == "/metrics":
            return dcgm_text(self.cluster, self.node)
        parts = path.strip("/").split("/")
        if len(parts) == 3 and parts[0] == "vllm" and parts[2] == "metrics":
            with self.cluster.lock():
                for pod in self.cluster.nodes[self.node].pods.values():
                    if pod.name == parts[1] and pod.server is not None:
                        return vllm_text(pod.server.snapshot())
        return None

    def start(self) -> NodeEndpoints:
        """Start serving in a background thread."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and release the port."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
