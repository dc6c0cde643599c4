"""The default demo, once, and every report command on its defaults: answers a user can act on.

One run of ``sits-observe demo`` as a newcomer starts it (its default cluster, seed and
intervals; a bounded ``--duration``, a folder of its own and no Streamlit app, whose pages are
read below through ``streamlit.testing``), then each report command of the registry with its
default flags on the demo's file:

- an answer wherever the data allows one: no traceback, at least one table with rows, and no
  "not enough data" where the history is past the report's own floors;
- values inside physical ranges: every ratio 0-1, power at most the GPU model's TDP, latencies
  of a Llama2-70B server (the demo's model), fragmentation as the FGD identities give it;
- no proposal over the cluster's capacity, nor under what its running pods request;
- at 100 columns on a terminal, every column header whole on one line (no ``…``, no wrap).

Each bound comes from outside the report under test: the store's rows, a datasheet, the
report's own settings model, so a wrong report fails here whatever the demo's seed.
"""

from __future__ import annotations

import json
import math
import os
import pty
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import pytest
from streamlit.testing.v1 import AppTest
from typer.testing import CliRunner

from sits_observe.analytics.trends.clusters import WORD_QUORUM, describe
from sits_observe.analytics.trends.settings import TrendSettings
from sits_observe.domain.units import Unit, human
from sits_observe.lab.catalog import all_reports
from sits_observe.lab.demo.demo import DEMO_SLO_S, DemoSettings
from sits_observe.reports.actions.recommend import RecommendQuery
from sits_observe.surfaces.cli.main import app

pytestmark = [pytest.mark.slow, pytest.mark.k8s]

NAMES = sorted(all_reports())
SITS = str(Path(sys.executable).with_name("sits-observe"))
#: Long enough for every collector, the inventory and two controller passes (10 s apart) to
#: write, and for the right-sizing floors (60 s, 20 samples) to be passed; the whole module
#: then costs about two minutes on a 2-core machine.
DURATION_S = 90
#: Reports that refuse to run on their defaults, with the start of their one-line reason.
NEEDS_FLAGS = {"capacity": "give --prices (Pareto frontier) and/or --target-rps (sizing)"}
#: Board power limits (TDP), watts: NVIDIA H100 SXM5 and A100 SXM4 80GB datasheets. The
#: demo's GPU labels name the model ("gpu-node-1/0 (H100 80GB)").
TDP_W = {"H100": 700.0, "A100": 400.0}
#: Ratio columns that are not a share of a whole: signed changes and slopes, a load past 100 %,
#: a correlation. Every other ``ratio`` column is a share, 0-1.
NOT_A_SHARE = {
    "change_ratio",
    "slope_per_h",
    "arrived_ratio",
    "first_failure_arrived",
    "daily_amplitude",
    "resid_std",
}
#: A Llama2-70B decode step at tensor parallel 4 takes about 15-50 ms on H100 / A100 at the
#: batches the demo runs (vLLM's and NVIDIA's published figures); the bounds leave a factor of
#: 1.5-4 either side, and fail on a unit slip (ms for s) or a latency from another model.
SECONDS_PER_TOKEN = (0.01, 0.2)


def demo_paths(workdir: Path) -> tuple[str, ...]:
    """The demo's file and folder, in a test's own directory."""
    return ("--db", str(workdir / "sits.duckdb"), "--workdir", str(workdir))


def _no_traceback(stderr: str) -> None:
    assert "Traceback" not in stderr, stderr


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str, float]]:
    """(database, the demo's stderr, wall seconds) after one default demo run."""
    workdir = tmp_path_factory.mktemp("plausibility")
    db = workdir / "sits.duckdb"
    started = time.monotonic()
    result = subprocess.run(
        [SITS, "demo", "--duration", str(DURATION_S), "--no-ui", *demo_paths(workdir)],
        capture_output=True,
        text=True,
        timeout=DURATION_S + 240,
        env={**os.environ, "COLUMNS": "100"},
        check=False,
    )
    assert result.returncode == 0, result.stderr
    yield db, result.stderr, time.monotonic() - started


@pytest.fixture(scope="module")
def db(demo: tuple[Path, str, float]) -> Path:
    return demo[0]


def query(db: Path, sql: str, params: list[Any] | None = None) -> list[tuple[Any, ...]]:
    with duckdb.connect(str(db), read_only=True) as con:
        return con.execute(sql, params or []).fetchall()


def invoke(*args: str) -> tuple[int, str, str]:
    outcome = CliRunner().invoke(app, list(args), env={"SITS_DB": "", "SITS_SERVICE": ""})
    return outcome.exit_code, outcome.stdout, outcome.stderr


@pytest.fixture(scope="module")
def docs(db: Path) -> dict[str, dict[str, Any]]:
    """Each report's JSON on its defaults (the reports that need flags left out)."""
    out = {}
    for name in NAMES:
        if name in NEEDS_FLAGS:
            continue
        code, stdout, stderr = invoke(name, "--db", str(db), "-o", "json")
        assert code == 0, f"{name}: {stderr}"
        _no_traceback(stderr)
        out[name] = json.loads(stdout)
    return out


#: Runs each command in one interpreter whose stdout is a terminal, so the tables are laid out
#: for its width as a user's shell shows them; a line of its own separates the commands.
_DRIVER = """
import sys
from sits_observe.surfaces.cli.main import app
for name in sys.argv[2:]:
    print("=== " + name, flush=True)
    try:
        app([name, "--db", sys.argv[1]], prog_name="sits-observe")
    except SystemExit:
        pass
    sys.stdout.flush()
"""


@pytest.fixture(scope="module")
def terminal(db: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, str], str]:
    """Each command's table output on a 100-column terminal (a pty), and all their stderr."""
    controller, tty = pty.openpty()
    errors = tmp_path_factory.mktemp("terminal") / "stderr.txt"
    env = {**os.environ, "COLUMNS": "100", "LINES": "50", "TERM": "dumb", "NO_COLOR": "1"}
    env |= {"SITS_DB": "", "SITS_SERVICE": ""}
    with errors.open("w") as stderr:
        proc = subprocess.Popen(
            [sys.executable, "-c", _DRIVER, str(db), *NAMES], stdout=tty, stderr=stderr, env=env
        )
        os.close(tty)
        chunks = []
        while True:
            try:
                chunk = os.read(controller, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            chunks.append(chunk)
        os.close(controller)
        assert proc.wait(timeout=300) == 0
    text = b"".join(chunks).decode("utf-8").replace("\r\n", "\n")
    outputs: dict[str, str] = {}
    for block in text.split("=== ")[1:]:
        name, _, body = block.partition("\n")
        outputs[name.strip()] = body
    return outputs, errors.read_text(encoding="utf-8")


def tables(doc: dict[str, Any]) -> dict[str, tuple[list[dict[str, Any]], list[dict[str, Any]]]]:
    """name -> (columns, rows) of each table of a report's JSON, ``main`` first."""
    out = {"main": (doc["columns"], doc["rows"])}
    out |= {k: (t["columns"], t["rows"]) for k, t in doc["tables"].items()}
    return out


def numbers(rows: list[dict[str, Any]], column: str) -> list[float]:
    values = [r.get(column) for r in rows]
    return [float(v) for v in values if isinstance(v, int | float) and not isinstance(v, bool)]


# -- the run itself ---------------------------------------------------------------------------


def test_the_demo_runs_its_duration_and_prints_no_traceback(demo: tuple[Path, str, float]) -> None:
    _db, stderr, wall_s = demo
    _no_traceback(stderr)
    assert f" of {DURATION_S} s" in stderr  # its status line counts to the duration
    assert "Ctrl-C to stop" not in stderr  # a bounded run says how long, not how to stop it
    assert wall_s >= DURATION_S


def test_every_report_in_the_registry_is_a_command() -> None:
    code, stdout, _ = invoke("--help")
    assert code == 0
    listed = {line.split()[0] for line in stdout.splitlines() if line.startswith("  ")}
    assert set(NAMES) <= listed


@pytest.mark.parametrize("name", NAMES)
def test_each_report_answers_on_its_defaults(name: str, db: Path, docs: dict[str, Any]) -> None:
    if name in NEEDS_FLAGS:
        code, stdout, stderr = invoke(name, "--db", str(db))
        assert code == 2 and stdout == "", stderr
        assert stderr.strip().splitlines() == [f"error: {NEEDS_FLAGS[name]}"]
        return
    doc = docs[name]
    assert doc["report"] == name
    # Something to act on: a table with rows (a report whose findings are empty still lists
    # what it looked at, e.g. the tenants with no SLA or the GPU generations).
    assert any(rows for _, rows in tables(doc).values()), (name, doc["notes"])


@pytest.mark.parametrize("name", NAMES)
def test_no_header_is_cut_or_wrapped_at_100_columns(
    name: str, docs: dict[str, Any], terminal: tuple[dict[str, str], str]
) -> None:
    outputs, stderr = terminal
    _no_traceback(stderr)
    text = outputs[name]
    if name in NEEDS_FLAGS:
        assert text.strip() == ""
        return
    lines = text.splitlines()
    assert all(len(line) <= 100 for line in lines), max(lines, key=len)
    # A header row is the line above a table's rule (a line of ─).
    headers = [
        lines[i - 1]
        for i, line in enumerate(lines)
        if i and line.strip() and set(line.strip()) == {"─"}
    ]
    assert headers and not any("…" in h for h in headers), headers
    # Every table with rows is printed, and the main one even when empty.
    shown = [
        c["header"]
        for table, (cols, rows) in tables(docs[name]).items()
        if rows or table == "main"
        for c in cols
        if not c["wide"]
    ]
    missing = [h for h in shown if not any(f" {h} " in f" {row} " for row in headers)]
    assert not missing, (missing, headers)


@pytest.mark.parametrize("name", NAMES)
def test_every_value_lies_in_its_physical_range(name: str, docs: dict[str, Any]) -> None:
    if name in NEEDS_FLAGS:
        return
    for table, (columns, rows) in tables(docs[name]).items():
        for c in columns:
            values = numbers(rows, c["name"])
            where = f"{name}.{table}.{c['name']}"
            assert all(math.isfinite(v) for v in values), where
            if c["unit"] == "ratio" and c["name"] not in NOT_A_SHARE:
                assert all(0 <= v <= 1 + 1e-9 for v in values), (where, values)
            if c["unit"] == "score":
                low = -1 if c["name"] == "correlation" else 0
                assert all(low <= v <= 1 + 1e-9 for v in values), (where, values)
            if c["unit"] in ("seconds", "bytes", "watts", "milli_cpu", "milli_gpu", "integer"):
                assert all(v >= 0 for v in values), (where, values)
            if c["unit"] == "watts":
                for row in rows:
                    label = str(row.get("gpu") or row.get("model") or "")
                    (limit,) = [w for model, w in TDP_W.items() if model in label]
                    assert row[c["name"]] <= limit, (where, row)


# -- each report's own figures ----------------------------------------------------------------


def test_fleet_counts_the_demo_s_gpus_within_their_power_limits(
    db: Path, docs: dict[str, Any]
) -> None:
    defaults = DemoSettings(db_path=db, workdir=db.parent)
    fleet = docs["fleet"]
    assert fleet["facts"]["gpus"] == defaults.nodes * defaults.gpus_per_node
    assert fleet["facts"]["idle_gpus"] <= fleet["facts"]["gpus"]
    assert fleet["facts"]["allocated_gpus"] <= fleet["facts"]["gpus"]
    gpus = fleet["tables"]["gpus"]["rows"]
    assert len(gpus) == fleet["facts"]["gpus"]
    # Every GPU is one of the two models, each under its own TDP (already checked per row).
    assert {next(m for m in TDP_W if m in g["gpu"]) for g in gpus} == set(TDP_W)


def test_latency_is_that_of_a_llama2_70b_server(db: Path, docs: dict[str, Any]) -> None:
    ((count, low, high, tokens),) = query(
        db,
        "SELECT count(*), min(latency_s), max(latency_s), median(output_tokens) FROM requests "
        "WHERE ok",
    )
    (row,) = docs["latency"]["rows"]
    assert row["model"] == "llama2-70b" and row["count"] == count
    assert low <= row["p50_s"] <= row["p95_s"] <= row["p99_s"] <= high
    per_token = row["p50_s"] / tokens
    assert SECONDS_PER_TOKEN[0] <= per_token <= SECONDS_PER_TOKEN[1], per_token


def _knee_consistent(bins: list[dict[str, Any]], knee_rps: float | None) -> None:
    """The knee is the used bin deepest below the chord from the first used bin to the last;
    no knee means no bin lies below it."""
    used = [b for b in bins if b["used"]]
    assert used
    first, last = used[0], used[-1]
    span = last["throughput_lo_rps"] - first["throughput_lo_rps"]

    def below(b: dict[str, Any]) -> float:
        if not span:
            return 0.0
        t = (b["throughput_lo_rps"] - first["throughput_lo_rps"]) / span
        return first["p95_s"] + t * (last["p95_s"] - first["p95_s"]) - b["p95_s"]

    depths = {b["throughput_lo_rps"]: below(b) for b in used[1:-1]}
    if knee_rps is None:
        assert all(d <= 1e-9 for d in depths.values()), depths
    else:
        assert depths[knee_rps] == max(depths.values()) > 0, (knee_rps, depths)


def test_heatmap_finds_the_knee_the_bins_show_and_the_safe_max_at_the_demo_s_slo(
    db: Path, docs: dict[str, Any]
) -> None:
    heat = docs["heatmap"]
    (limits,) = heat["tables"]["limits"]["rows"]
    _knee_consistent(heat["rows"], limits["knee_rps"])
    stored = query(db, "SELECT count(*) FROM requests WHERE ok")[0][0]
    assert 0 < limits["requests"] <= stored
    # The command the demo prints: its SLO gives a safe maximum, the highest bin whose P95 and
    # every lower bin's is within it.
    code, stdout, stderr = invoke(
        "heatmap", "--db", str(db), "--slo-ms", f"{DEMO_SLO_S * 1000:g}", "-o", "json"
    )
    assert code == 0, stderr
    at_slo = json.loads(stdout)
    (limits,) = at_slo["tables"]["limits"]["rows"]
    within = []
    for b in (b for b in at_slo["rows"] if b["used"]):
        if b["p95_s"] > DEMO_SLO_S:
            break
        within.append(b["throughput_lo_rps"])
    assert limits["safe_max_rps"] == (within[-1] if within else None), at_slo["rows"]


def test_recommend_stays_inside_the_cluster_and_above_what_runs(
    db: Path, docs: dict[str, Any]
) -> None:
    rec = docs["recommend"]
    facts, rows = rec["facts"], rec["rows"]
    assert facts["allocatable_gpus"] == docs["fleet"]["facts"]["gpus"]
    capacity = {  # in the rows' units: GPUs, milli-CPU, bytes
        "quota-gpu": facts["allocatable_gpus"],
        "quota-cpu": facts["allocatable_cpu_milli"],
        "quota-memory": facts["allocatable_memory_bytes"],
    }
    running: dict[tuple[str, str], float] = {}
    for ns, gpu, cpu, memory in query(
        db,
        "SELECT namespace, sum(coalesce(gpu_request, 0)), sum(coalesce(cpu_request_milli, 0)), "
        "sum(coalesce(memory_request_bytes, 0)) FROM pods "
        "WHERE ts = (SELECT max(ts) FROM pods) AND phase IN ('Running', 'Pending') GROUP BY ALL",
    ):
        running |= {(ns, "quota-gpu"): gpu, (ns, "quota-cpu"): cpu, (ns, "quota-memory"): memory}
    for action, limit in capacity.items():
        quotas = [r for r in rows if r["action"] == action and r["proposed_value"] is not None]
        assert quotas, action
        # Within the cluster, unless what its pods request already passes it (Pending ones
        # count, as a ResourceQuota counts them; GPUs shared by HAMi count one request each),
        # since no quota is proposed under what the pods request.
        runs = sum(v for (_, a), v in running.items() if a == action)
        total = sum(r["proposed_value"] for r in quotas)
        assert total <= max(limit, runs) + 1e-6, (action, runs, quotas)
        for r in quotas:
            assert r["proposed_value"] >= running.get((r["namespace"], action), 0), r
    for r in rows:
        if r["action"] == "replicas" and r["proposed_value"] is not None:
            gpus = json.loads(r["evidence"])["gpus_per_replica"]
            assert r["proposed_value"] * gpus <= facts["allocatable_gpus"], r
        # VPA's confidence grows with history: nothing under an hour of it is "high".
        if r["history_s"] is not None and r["history_s"] < 3600:
            assert not str(r["confidence"]).startswith("high"), r
    floors = RecommendQuery()
    short = [r for r in rows if str(r["reason"]).startswith("not enough data")]
    for r in short:  # said only where the history is under the rule's own floor
        assert r["history_s"] is None or r["history_s"] < floors.min_history_s, r
    # An answer where the history allows one: some GPU-memory row has a proposal (how many
    # depends on how many samples the 90 s demo collected under the machine's load; every
    # row without one says it has too little history, above).
    sized = [r for r in rows if r["action"] == "gpu-memory"]
    assert any(r["proposed"] is not None for r in sized), sized


def test_fragmentation_follows_fgd_s_identities(docs: dict[str, Any]) -> None:
    frag = docs["fragmentation"]
    (row,) = frag["rows"]
    assert row["total_milli"] == 1000 * docs["fleet"]["facts"]["gpus"]
    assert row["frag_milli"] <= row["idle_milli"] <= row["total_milli"]
    assert row["frag_ratio"] == pytest.approx(row["frag_milli"] / row["idle_milli"])
    assert row["frag_amount_ratio"] == pytest.approx(row["frag_milli"] / row["total_milli"])
    causes = frag["tables"]["causes"]["rows"]
    assert sum(c["frag_milli"] for c in causes) == pytest.approx(row["frag_milli"])
    if row["frag_milli"]:
        assert sum(c["share"] for c in causes) == pytest.approx(1.0)


def test_trends_call_a_flat_series_flat_and_a_leak_growth(db: Path, docs: dict[str, Any]) -> None:
    """Each series earns its words on its own shape (a GPU whose memory never moves is flat,
    never leaking), and a cluster carries a word only when at least two thirds of its members
    earn it (``WORD_QUORUM``): a leaking cluster's members mostly grow."""
    trends = docs["trends"]
    flat = {
        uuid
        for (uuid,) in query(
            db,
            "SELECT gpu_uuid FROM gpu_samples GROUP BY ALL "
            "HAVING max(fb_used_bytes) = min(fb_used_bytes) AND max(fb_used_bytes) > 0",
        )
    }
    assert flat  # the vLLM servers hold 90 % of their framebuffer from the start
    settings = TrendSettings()
    own: dict[str, tuple[str, ...]] = {}
    for row in trends["rows"]:
        members = [describe(m, settings) for m in row["member_features"]]
        own |= {m["key"]: w for m, w in zip(row["member_features"], members, strict=True)}
        for word in set(row["words"]) - {"mixed"}:  # "mixed": no word has the quorum
            earned = sum(word in w for w in members)
            assert earned >= WORD_QUORUM * len(members) - 1e-9, (word, row["member_keys"])
    for row in trends["tables"]["noise"]["rows"]:
        own[row["key"]] = tuple(row["words"])
    for row in (*trends["rows"], *trends["tables"]["noise"]["rows"]):
        if "leaking" in row["words"]:
            assert row["slope_per_h"] > 0, row
    assert flat <= set(own)
    assert {own[gpu][0] for gpu in flat} == {"flat"}, {gpu: own[gpu] for gpu in flat}


def test_batching_gives_one_self_consistent_row_per_server_group(docs: dict[str, Any]) -> None:
    batching = docs["batching"]
    rows, candidates = batching["rows"], batching["tables"]["candidates"]["rows"]
    groups = [(r["model"], r["gpu"]) for r in rows]
    assert len(groups) == len(set(groups))
    served = {
        next(m for m in TDP_W if m in g["gpu"])
        for g in docs["fleet"]["tables"]["gpus"]["rows"]
        if str(g["pod"] or "").startswith("inference/")
    }
    assert {gpu for _, gpu in groups} == served  # A100 and H100 servers apart
    headroom = batching["facts"]["headroom_ratio"]
    for r in rows:
        mine = [c for c in candidates if (c["model"], c["gpu"]) == (r["model"], r["gpu"])]
        (chosen,) = [c for c in mine if c["recommended"]]
        assert chosen["setting"] == r["recommended"]
        assert chosen["capacity_rps"] >= r["throughput_rps"] * (1 + headroom) - 1e-9, r
        capacities = [c["capacity_rps"] for c in mine]
        assert capacities == sorted(capacities)  # a larger cap never serves less


def test_tenants_are_the_namespaces_with_requests(db: Path, docs: dict[str, Any]) -> None:
    counts = dict(query(db, "SELECT namespace, count(*) FROM requests WHERE ok GROUP BY ALL"))
    tenants = docs["tenants"]["tables"]["tenants"]["rows"]
    assert {t["tenant"]: t["requests"] for t in tenants} == counts
    assert all(t["p99_s"] > 0 for t in tenants)


def test_the_heatmap_page_shows_the_cli_s_knee_and_safe_max(
    db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Streamlit page on the demo's file at the demo's SLO, read element by element
    (``streamlit.testing``): the same knee and safe maximum as ``heatmap`` prints."""
    slo_ms = f"{DEMO_SLO_S * 1000:g}"
    code, stdout, stderr = invoke("heatmap", "--db", str(db), "--slo-ms", slo_ms, "-o", "json")
    assert code == 0, stderr
    (limits,) = json.loads(stdout)["tables"]["limits"]["rows"]
    for name in ("SITS_UI_SERVICE", "SITS_UI_TOKEN_FILE", "SITS_TOKEN", "SITS_UI_UNTIL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("SITS_UI_DB", str(db))
    monkeypatch.setenv("SITS_UI_SINCE", "30d")
    monkeypatch.setenv("SITS_UI_SLO_MS", slo_ms)
    at = AppTest.from_file(str(Path(__file__).parents[2] / "dashboards" / "app.py"))
    at.default_timeout = 120
    at.run()
    at.switch_page("views/heatmap.py").run()
    assert not at.exception and not at.error, [e.value for e in (*at.exception, *at.error)]
    shown = {m.label: m.value for m in at.metric}

    def as_shown(value: float | None) -> str:
        return "none" if value is None else human(value, Unit.rate)

    assert shown["Knee"] == as_shown(limits["knee_rps"])
    assert shown["Safe max throughput"] == as_shown(limits["safe_max_rps"])
    assert shown["P95 SLO"] == human(DEMO_SLO_S, Unit.seconds)
