"""``kubectl sits recommend --service URL`` against a running ``sits-observe serve``.

In a cluster the DuckDB file is on the service's volume, locked by it, so ``kubectl sits``
reads through the service's API with a read token. The service here is a real child process
(the installed entry point, flags, token files, a DuckDB file in ``tmp_path``); the plug-in
is the installed ``kubectl-sits`` script, and the same app in-process. Its answer must be
the one the file gives: the report built from a copy of the file taken before ``serve``
started, and, after rows were ingested through the service's API, the report built from the
file once ``serve`` stopped.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pyarrow as pa
from typer.testing import CliRunner

from sits_observe.collectors.agent.wire import (
    CONTENT_TYPE,
    HEADER_BATCH_ID,
    HEADER_NODE,
    encode_batch,
)
from sits_observe.reports.actions.recommend import SPEC
from sits_observe.reports.result import Report
from sits_observe.reports.spec import run_report
from sits_observe.reports.window import WindowRequest
from sits_observe.store import Store
from sits_observe.surfaces.cli.main import kubectl_app
from tests.integration.serve_process import TOKEN, ServeProcess
from tests.unit.reports.recommend_store import T0, fill

READ_TOKEN = "kubectl-read-token"
NEWEST = ("--until", "newest")


def kubectl_script() -> list[str]:
    """The installed ``kubectl-sits`` (what kubectl runs for ``kubectl sits``)."""
    script = Path(sys.executable).with_name("kubectl-sits")
    if script.exists():
        return [str(script)]
    return [
        sys.executable,
        "-c",
        "from sits_observe.surfaces.cli.main import kubectl_main as m; m()",
    ]


def kubectl(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("SITS_")}
    return subprocess.run(
        [*kubectl_script(), *args],
        capture_output=True,
        text=True,
        env={**clean, "COLUMNS": "100", **(env or {})},
        timeout=120,
        check=False,
    )


def in_process(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    """``kubectl sits ARGS`` through :func:`kubectl_app` (the app the entry point runs)."""
    base = {"SITS_DB": "", "SITS_SERVICE": "", "SITS_TOKEN": ""}
    outcome = CliRunner().invoke(kubectl_app(), list(args), env={**base, **(env or {})})
    return outcome.exit_code, outcome.stdout, outcome.stderr


def from_file(db: Path, **values: Any) -> Report:
    with Store.open(db, read_only=True) as store:
        return run_report(SPEC, store, WindowRequest.parse(None, "newest"), SPEC.validate(values))


def slow_requests() -> bytes:
    """50 requests of finance/p1 at T0 + 1..50 s taking 200 ms, as a node agent sends them."""
    seconds = range(1, 51)
    table = pa.table(
        {
            "ts": pa.array([T0 + timedelta(seconds=s) for s in seconds], pa.timestamp("us")),
            "model": ["m"] * 50,
            "latency_s": [0.2] * 50,
            "ok": [True] * 50,
            "namespace": ["finance"] * 50,
            "pod": ["p1"] * 50,
            "prompt_tokens": pa.array([100] * 50, pa.int64()),
            "output_tokens": pa.array([50] * 50, pa.int64()),
        }
    )
    return encode_batch({"requests": table})


def test_kubectl_sits_recommend_reads_through_a_running_serve(tmp_path: Path) -> None:
    read_token = tmp_path / "read.token"
    read_token.write_text(READ_TOKEN + "\n", encoding="utf-8")
    service = ServeProcess(tmp_path, "--read-token-file", str(read_token))
    with Store.open(service.db) as store:
        fill(store)
    copy = tmp_path / "copy.duckdb"
    shutil.copyfile(service.db, copy)
    expected = from_file(copy)
    assert expected.main.rows.num_rows >= 8  # a store that has something to recommend
    source = ("--service", service.url, "--token-file", str(read_token))
    service.start()
    try:
        remote = kubectl("recommend", *source, *NEWEST, "-o", "json")
        assert remote.returncode == 0, remote.stderr
        doc = json.loads(remote.stdout)
        assert doc == expected.document()  # window, columns, rows, notes and facts
        assert remote.stderr.startswith(f"window: {expected.window.describe()}")
        local = kubectl("recommend", "--db", str(copy), *NEWEST, "-o", "json")
        assert local.returncode == 0, local.stderr
        assert json.loads(local.stdout) == doc
        # The table a person reads is the same, whichever the source.
        table = kubectl("recommend", *source, *NEWEST)
        assert table.returncode == 0, table.stderr
        assert table.stdout == kubectl("recommend", "--db", str(copy), *NEWEST).stdout
        lines = table.stdout.splitlines()
        assert any(li.split()[:2] == ["finance", "p1"] for li in lines) and "56Gi" in table.stdout

        # The same through the app in-process, the source from the environment, with the
        # settings passed on as query parameters.
        env = {"SITS_SERVICE": service.url, "SITS_TOKEN": READ_TOKEN}
        code, stdout, stderr = in_process(
            "recommend", *NEWEST, "-o", "json", "--action", "quota-memory", "-n", "finance", env=env
        )
        assert code == 0, stderr
        wanted = from_file(copy, action="quota-memory", namespace="finance").document()
        assert json.loads(stdout) == wanted and [r["proposed"] for r in wanted["rows"]] == ["56Gi"]
        code, _, stderr = in_process("recommend", *source[:2], "--token-file", str(tmp_path / "x"))
        assert code == 2 and "token" in stderr
        bad = tmp_path / "bad.token"
        bad.write_text("not-the-token\n", encoding="utf-8")
        code, _, stderr = in_process("recommend", *source[:2], "--token-file", str(bad))
        assert code == 2 and "check the token file" in stderr

        # Rows an agent sends through the API are in the next answer.
        answer = httpx.post(
            service.url + "/api/v1/ingest",
            content=slow_requests(),
            headers={
                "Authorization": f"Bearer {TOKEN}",
                "Content-Type": CONTENT_TYPE,
                HEADER_BATCH_ID: "kubectl-test-1",
                HEADER_NODE: "n1",
            },
            timeout=30,
        )
        assert answer.status_code == 200, answer.text
        later = kubectl("recommend", *source, *NEWEST, "-o", "json")
        assert later.returncode == 0, later.stderr
        after = json.loads(later.stdout)
    finally:
        service.stop()
    assert after["facts"]["at"] == (T0 + timedelta(seconds=50)).isoformat() + "Z"
    rows = {(r["target"], r["action"]): r for r in after["rows"]}
    evidence = json.loads(rows[("finance/p1", "time-slice")]["evidence"])
    assert evidence["p95_latency_s"] > 0.1  # the slow requests count now (was ~35 ms)
    assert after == from_file(service.db).document()
