"""Screenshots of the Streamlit app's pages for docs/ui.md: ``python docs/make_screenshots.py``.

Builds a small, seeded store (4 nodes of 4 H100s, three hours: GPU samples each minute,
an inventory snapshot every 10 minutes as pods come and go, the containers' cgroup samples,
two models' requests ramping up to their knee, a few controller decisions), starts
``streamlit run dashboards/app.py -- --db FILE --since 3h --until newest`` on loopback and
shoots each page with headless Chromium (Debian package ``chromium``) into
``docs/img/ui-<page>.png``, each reduced to a 256-colour palette so it stays small.

Streamlit draws client-side over a websocket, so each shot is retried with a longer
virtual-time budget until the PNG holds a drawn page (as tests/integration/test_ui_browser.py
checks it).
"""

from __future__ import annotations

import argparse
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pyarrow as pa
from PIL import Image

from sits_observe.domain.tables import conform
from sits_observe.store import Store

ROOT = Path(__file__).resolve().parents[1]
APP = ROOT / "dashboards" / "app.py"
OUT = ROOT / "docs" / "img"
#: (page path, file name); "" is the default page (fleet).
PAGES = (
    ("", "fleet"),
    ("heatmap", "heatmap"),
    ("fragmentation", "fragmentation"),
    ("whatif?run=1", "whatif"),  # ?run=1: the replay runs at once
    ("decisions", "decisions"),
)
START = datetime(2026, 3, 2, 6, 0)
HOURS = 3
NODES = ("gpu-node-1", "gpu-node-2", "gpu-node-3", "gpu-node-4")
GPUS_PER_NODE = 4
GIB = 1024**3
MODEL = "NVIDIA H100 80GB HBM3"
BUDGETS_MS = (15_000, 30_000, 45_000, 60_000, 90_000)
#: A drawn page: this share of the area right of the sidebar unlike the background (a page
#: still running shows only its navigation there).
MIN_INK_RATIO = 0.05


def _append(store: Store, table: str, rows: list[dict[str, Any]]) -> None:
    store.append(table, conform(table, pa.Table.from_pylist(rows)))


def _pods_at(k: int) -> list[dict[str, Any]]:
    """The pods bound at snapshot ``k``: more arrive as the hours go by, some have left; each
    goes to the first node with the GPUs and CPU it asks for (none is overcommitted)."""
    free_gpu = dict.fromkeys(NODES, GPUS_PER_NODE)  # whole GPUs; a half-GPU pod takes one
    free_cpu = dict.fromkeys(NODES, 16_000)
    pods = []
    for i in range(6 + k // 2):
        if (7 * i + k) % 9 == 0:
            continue  # this one has finished by now
        gpus = 2 if i % 5 == 0 else 1
        milli = 500 if i % 7 == 3 and gpus == 1 else 1000
        cpu = 6000 if gpus == 2 else 3000
        node = next((n for n in NODES if free_gpu[n] >= gpus and free_cpu[n] >= cpu), None)
        if node is None:
            continue  # pending: no node has room
        free_gpu[node] -= gpus
        free_cpu[node] -= cpu
        pods.append(
            {
                "pod_uid": f"uid-{i}",
                "namespace": "serving" if i % 2 else "training",
                "pod": f"{'llm' if i % 2 else 'train'}-{i}",
                "node": node,
                "phase": "Running",
                "gpu_request": gpus,
                "gpu_milli": milli,
                "cpu_request_milli": cpu,
                "memory_request_bytes": 32 * GIB,
            }
        )
    return pods


def fill(store: Store, seed: int = 7) -> None:
    """The store the screenshots show (see the module docstring)."""
    rng = np.random.default_rng(seed)
    snapshots = range(0, HOURS * 60, 10)
    for k, minute in enumerate(snapshots):
        at = START + timedelta(minutes=minute)
        _append(
            store,
            "nodes",
            [
                {
                    "ts": at,
                    "node": n,
                    "gpu_allocatable": GPUS_PER_NODE,
                    "gpu_product": MODEL,
                    "cpu_allocatable_milli": 16_000,
                    "memory_allocatable_bytes": 512 * GIB,
                    "ready": True,
                }
                for n in NODES
            ],
        )
        _append(store, "pods", [{"ts": at, **p} for p in _pods_at(k)])
    gpus, cgroups = [], []
    for minute in range(HOURS * 60):
        at = START + timedelta(minutes=minute)
        for n, node in enumerate(NODES):
            for g in range(GPUS_PER_NODE):
                busy = (n + g) % 3 != 0
                util = float(np.clip((0.55 + 0.3 * np.sin(minute / 25 + g)) * busy, 0, 1))
                leak = 1 + minute // 12 if (n, g) == (2, 1) else 0
                used = (20 + 40 * busy + leak + rng.normal(0, 1)) * GIB
                gpus.append(
                    {
                        "ts": at,
                        "node": node,
                        "gpu_uuid": f"GPU-{n}{g}00000-0000",
                        "gpu_index": g,
                        "model_name": MODEL,
                        "namespace": "serving" if busy else None,
                        "pod": f"llm-{n}{g}" if busy else None,
                        "container": "server" if busy else None,
                        "gpu_util_ratio": util + 0.01 * rng.random(),
                        "fb_used_bytes": int(used),
                        "fb_free_bytes": int(80 * GIB - used),
                        "fb_total_bytes": 80 * GIB,
                        "power_w": 90 + 500 * util,
                        "gpu_temp_c": 35 + 30 * util,
                        "source": "dcgm",
                    }
                )
                if busy:
                    cgroups.append(
                        {
                            "ts": at + timedelta(seconds=1),
                            "node": node,
                            "pod_uid": f"uid-{n}{g}",
                            "container_id": f"{n}{g}" * 32,
                            "namespace": "serving",
                            "pod": f"llm-{n}{g}",
                            "container": "server",
                            "memory_current_bytes": int((8 + 4 * g) * GIB),
                        }
                    )
    _append(store, "gpu_samples", gpus)
    _append(store, "container_samples", cgroups)
    _append(store, "requests", _requests(rng))
    _append(store, "decisions", _decisions())


def _requests(rng: np.random.Generator) -> list[dict[str, Any]]:
    """Two models, load ramping over the last half hour; latency bends past ~40 rps."""
    rows = []
    begin = START + timedelta(hours=HOURS) - timedelta(minutes=30)
    for model, knee in (("llama-3-8b", 40.0), ("mistral-7b", 25.0)):
        for second in range(0, 1800, 2):
            rate = 4 + 56 * second / 1800
            for i in range(int(rate)):
                at = begin + timedelta(seconds=second, microseconds=i * 1_000_000 // int(rate))
                base = 0.12 + 0.9 * max(rate - knee, 0) / knee
                rows.append(
                    {
                        "ts": at,
                        "model": model,
                        "latency_s": float(base * rng.lognormal(0, 0.25)),
                        "ok": True,
                    }
                )
    return rows


def _decisions() -> list[dict[str, Any]]:
    at = START + timedelta(hours=HOURS) - timedelta(minutes=20)
    return [
        {
            "ts": at + timedelta(minutes=k),
            "kind": "Node",
            "name": NODES[k % len(NODES)],
            "action": action,
            "outcome": outcome,
            "mode": "dry-run",
            "dry_run": True,
            "reason": reason,
        }
        for k, (action, outcome, reason) in enumerate(
            [
                ("memory-class", "recommended", "P95 framebuffer 71% of 80Gi: class large"),
                ("fragmentation", "recommended", "FGD 42% of the free GPUs: prefer packing"),
                ("memory-class", "skipped:rate-limited", "one change per node per 10m"),
                ("fragmentation", "recommended", "FGD 38% of the free GPUs: prefer packing"),
            ]
        )
    ]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _serve(db: Path, log: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = _free_port()
    command = [
        sys.executable, "-m", "streamlit", "run", str(APP),
        "--server.port", str(port), "--server.address", "127.0.0.1",
        "--server.headless", "true", "--browser.gatherUsageStats", "false",
        "--theme.base", "light", "--client.toolbarMode", "viewer",
        "--", "--db", str(db), "--since", f"{HOURS}h", "--until", "newest",
    ]  # fmt: skip
    proc = subprocess.Popen(command, stdout=log.open("wb"), stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"streamlit exited: {log.read_text()}")
        try:
            if httpx.get(url + "/_stcore/health", timeout=1).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    proc.terminate()
    raise SystemExit("streamlit did not start within 60 s")


def _shoot(chromium: str, url: str, png: Path, work: Path, size: tuple[int, int]) -> None:
    for attempt, budget in enumerate(BUDGETS_MS):
        raw = work / f"{png.stem}-{attempt}.png"
        subprocess.run(
            [
                chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                "--disable-background-networking", "--disable-component-update",
                "--disable-sync", f"--user-data-dir={work / f'profile-{png.stem}-{attempt}'}",
                f"--window-size={size[0]},{size[1]}", f"--virtual-time-budget={budget}",
                "--hide-scrollbars", f"--screenshot={raw}", url,
            ],
            check=False, capture_output=True, timeout=180,
        )  # fmt: skip
        time.sleep(1)
        if raw.exists() and _drawn(raw):
            with Image.open(raw) as image:
                small = image.convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT)
                small.save(png, optimize=True)
            shown = png.relative_to(ROOT) if png.is_relative_to(ROOT) else png
            print(f"{shown}: {png.stat().st_size / 1024:.0f} KiB")
            return
    raise SystemExit(f"{url}: the page did not draw within {BUDGETS_MS[-1] / 1000:g} s")


def _drawn(png: Path) -> bool:
    """A drawn page has text, tables and charts right of the sidebar: many colours, and more
    than :data:`MIN_INK_RATIO` of the area unlike the background."""
    with Image.open(png) as image:
        main = image.convert("RGB").crop((340, 0, image.width, image.height))
        colours = main.getcolors(maxcolors=1 << 22) or []
    if len(colours) < 64:
        return False
    background = max(count for count, _ in colours)
    return 1 - background / (main.width * main.height) >= MIN_INK_RATIO


def main() -> None:
    """Build the store, serve the app, shoot every page."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT, help="folder of the PNGs")
    parser.add_argument("--width", type=int, default=1280)
    parser.add_argument("--height", type=int, default=1500)
    args = parser.parse_args()
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        raise SystemExit("chromium not found (Debian package chromium)")
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="sits-shots-") as tmp:
        work = Path(tmp)
        db = work / "ui.duckdb"
        with Store.open(db) as store:
            fill(store)
        proc, url = _serve(db, work / "streamlit.log")
        try:
            for path, name in PAGES:
                _shoot(chromium, f"{url}/{path}", args.out / f"ui-{name}.png", work,
                       (args.width, args.height))  # fmt: skip
        finally:
            proc.terminate()
            proc.wait(timeout=30)


if __name__ == "__main__":
    main()
