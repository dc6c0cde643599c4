"""Cold start: from `sits-observe serve` started to its first correct extender answer.

The SITS documents ask for the first scheduling answer within 850 ms on 1,024 nodes. Here a
`serve` child process starts on a DuckDB file holding a cluster of N nodes x 8 GPUs
(``bench_extender.fill_store``: inventory, pods, one sample per GPU), and the client sends
``POST /scheduler/prioritize`` (every node's name, the pod of ``bench_extender.POD``) once
``GET /healthz`` answers (polled every 5 ms from the spawn), then every 5 ms until the answer
is the correct one: the host priorities the same handler code gives in this process on a
view built from the same file. Timed from the spawn, per run:

- **listening**: the first answer to ``GET /healthz`` (the interpreter, the imports, the store
  open, the app up; the prioritize calls start then: the first one waits for the view);
- **first correct answer**: the first prioritize answer equal to the expected one, with the
  view built on the first call (the default) and with ``--extender-warm-view`` (built when
  the service starts, while the port comes up; the start is then staged: the extender
  answers before the service's FastAPI app is imported, docs/extender.md, cold start); and
  the CPU time (user + system, all
  threads, Linux ``/proc/<pid>/stat``) the `serve` process had used by then, which moves far
  less than the wall time with the load other jobs put on the cores;
- the peer in the same script: the imports ``sits-observe serve`` pays before it listens
  when the start is not staged (``build_app("serve")`` and the app and server modules
  ``run_service`` imports, in a bare
  interpreter: the import floor, wall and CPU time; the CPU time moves less with the load
  other jobs put on the machine) and the view build alone in this process: the first one
  (with the imports the build does on first use: the analytics behind the slow signals)
  and the next one (a full build again, the imports done);
- where the import floor goes: ``python -X importtime`` over the same imports, each module's
  own time summed by its top-level package (the standard library as one; importtime's own
  overhead makes the sum larger than the floor).

With ``--baseline DIR`` (a directory holding another ``sits_observe`` package, e.g. the
last commit's: ``git archive HEAD sits_observe | tar -x -C DIR``) every run also times that
package's `serve` (``PYTHONPATH=DIR``), alternately with this checkout's, so both see the same
load; its answer must equal this checkout's.

Every child runs with its bytecode cached, as in the image (deploy/image/install.sh compiles
it at install time): under ``PYTHONPYCACHEPREFIX`` in a temporary folder, filled by one
discarded start before the timed ones. A checkout run with ``PYTHONDONTWRITEBYTECODE=1`` and
no ``__pycache__`` would compile every sits_observe module on every spawn instead (about
0.2 s more here).

Run: ``.venv/bin/python bench/bench_extender_cold_start.py [--nodes 1024 5000] [--runs 5]
[--baseline DIR] [--record]``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path

import httpx
from _docs import write_block
from bench_extender import POD, TOKEN, fill_store, free_port

from sits_observe.control.extender.clusterview.view import build_view
from sits_observe.control.extender.clusterview.view_settings import ViewSettings
from sits_observe.control.extender.scoring import prioritize
from sits_observe.control.extender.scoring_settings import ScoringSettings
from sits_observe.control.extender.wire import host_priority_json, parse_extender_args
from sits_observe.store import Store

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs" / "benchmarks.md"
BEGIN = "<!-- extender-cold-start-bench:begin -->"
END = "<!-- extender-cold-start-bench:end -->"
HEADING = "## Extender cold start: `serve` started to its first correct answer"
TARGET_MS = 850.0
#: What ``sits-observe serve`` imports before it listens: its command, then the app and
#: server modules ``run_service`` imports (the server module where either layout keeps it,
#: so that a ``--baseline`` from before the service's ``http/`` package measures too).
FLOOR_CODE = """
from sits_observe.surfaces.cli.main import build_app
build_app('serve')
import importlib, sits_observe.surfaces.service.app
for module in ('sits_observe.surfaces.service.http.server', 'sits_observe.surfaces.service.server'):
    try:
        importlib.import_module(module)
        break
    except ModuleNotFoundError:
        pass
"""
#: The name of the package under test, and of the one ``--baseline`` names.
CHECKOUT, BASELINE = "this checkout", "baseline"
#: Packages reported under the name of the one they belong to.
PART_OF = {
    "pydantic_core": "pydantic",
    "annotated_types": "pydantic",
    "_polars_runtime_32": "polars",
    "starlette": "fastapi (+ starlette)",
    "fastapi": "fastapi (+ starlette)",
    "h11": "uvicorn (+ httptools, h11)",
    "httptools": "uvicorn (+ httptools, h11)",
    "uvicorn": "uvicorn (+ httptools, h11)",
    "click": "typer (+ click)",
    "typer": "typer (+ click)",
    "google": "protobuf (OTLP)",
    "opentelemetry": "protobuf (OTLP)",
}
IMPORT_LINE = re.compile(r"import time:\s+(\d+) \|\s+\d+ \| *(\S+)")


def expected_answer(
    db: Path, now: datetime
) -> tuple[bytes, list[dict[str, object]], tuple[float, float]]:
    """The request body, the answer the handler gives on a view of ``db``, and the s of the
    first full build in this process and of the next one."""
    builds_s = []
    with Store.open(db, read_only=True) as store:
        for _ in range(2):
            started = time.perf_counter()
            view = build_view(store, now, ViewSettings())
            builds_s.append(time.perf_counter() - started)
    body = json.dumps({"Pod": POD, "Nodes": None, "NodeNames": list(view.node_names)}).encode()
    call = parse_extender_args(body)
    result = prioritize(call.pod, view, call.nodes, ScoringSettings())
    answer = json.loads(host_priority_json(result.hosts, result.scores.tolist()))
    return body, answer, (builds_s[0], builds_s[1])


def cold_start(
    db: Path,
    body: bytes,
    expected: list[dict[str, object]],
    env: Mapping[str, str],
    *,
    warm: bool = False,
) -> tuple[float, float, float]:
    """(listening, first correct answer) in ms from the spawn of one `serve` process, and
    the CPU ms that process had used at its first correct answer."""
    port = free_port()
    serve = [
        str(Path(sys.executable).with_name("sits-observe")), "serve", "--db", str(db),
        "--port", str(port), "--log-level", "warning",
        *(["--extender-warm-view"] if warm else []),
    ]  # fmt: skip
    headers = {"Content-Type": "application/json"}
    started = time.perf_counter()
    proc = subprocess.Popen(
        serve,
        env={**env, "SITS_TOKEN": TOKEN},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    listening: float | None = None
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
            deadline = started + 120
            while time.perf_counter() < deadline:
                try:
                    if listening is None:  # the port first: the first call waits for the view
                        client.get("/healthz")
                        listening = time.perf_counter()
                    response = client.post("/scheduler/prioritize", content=body, headers=headers)
                except httpx.TransportError:
                    time.sleep(0.005)
                    continue
                now = time.perf_counter()
                if response.status_code == 200 and response.json() == expected:
                    return (listening - started) * 1000, (now - started) * 1000, cpu_ms(proc.pid)
                time.sleep(0.005)
            raise RuntimeError("no correct extender answer in 120 s")
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def cpu_ms(pid: int) -> float:
    """CPU time (user + system, all threads) process ``pid`` has used, ms; NaN off Linux.

    ``/proc/<pid>/stat`` fields 14 and 15 (utime, stime) in clock ticks (proc(5)); the fields
    are counted after the command name's closing parenthesis, as the name may hold spaces.
    """
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) * 1000 / os.sysconf("SC_CLK_TCK")


def import_floor_ms(env: Mapping[str, str]) -> tuple[float, float]:
    """(wall, CPU) ms of a bare interpreter doing ``serve``'s imports."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    # From a neutral folder: ``-c`` puts the working folder first on sys.path, before
    # PYTHONPATH (a --baseline package).
    subprocess.run(
        [sys.executable, "-c", FLOOR_CODE], check=True, env=env, cwd=tempfile.gettempdir()
    )
    wall_s = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_s = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return wall_s * 1000, cpu_s * 1000


def import_parts_ms(env: Mapping[str, str]) -> dict[str, float]:
    """The import floor's modules' own times (``-X importtime``), ms by top-level package."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", FLOOR_CODE],
        check=True,
        capture_output=True,
        text=True,
        env=env,
        cwd=tempfile.gettempdir(),
    )
    parts: dict[str, float] = {}
    for line in done.stderr.splitlines():
        found = IMPORT_LINE.match(line)
        if found is None:
            continue
        top = found[2].split(".")[0]
        name = "standard library" if top in sys.stdlib_module_names else PART_OF.get(top, top)
        parts[name] = parts.get(name, 0.0) + int(found[1]) / 1000
    return parts


def bytecode_env(cache: Path) -> dict[str, str]:
    """The children's environment: bytecode read from and written to ``cache``."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = str(cache)
    return env


def measure(
    nodes: int, runs: int, envs: Mapping[str, Mapping[str, str]]
) -> list[dict[str, object]]:
    """One result per package in ``envs`` (name -> children's environment), the packages'
    starts alternated within each run."""
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "cold.duckdb"
        now = datetime.now(UTC)
        with Store.open(db) as store:
            pods = fill_store(store, nodes, now)
        body, expected, (first_build_s, next_build_s) = expected_answer(db, now)
        keys = ("listening_ms", "answer_ms", "answer_cpu_ms", "warm_ms", "import_ms")
        found: dict[str, dict[str, list[float]]] = {
            name: {k: [] for k in (*keys, "import_cpu_ms")} for name in envs
        }
        for env in envs.values():
            cold_start(db, body, expected, env)  # a discarded start: the bytecode cache is full
        for run in range(runs):
            for name, env in envs.items():
                first, correct, cpu = cold_start(db, body, expected, env)
                warm = cold_start(db, body, expected, env, warm=True)[1]
                wall_ms, cpu_ms = import_floor_ms(env)
                for key, value in zip(keys, (first, correct, cpu, warm, wall_ms), strict=True):
                    found[name][key].append(value)
                found[name]["import_cpu_ms"].append(cpu_ms)
                print(
                    f"{nodes:,} nodes, {name}, run {run + 1}: listening {first:.0f} ms, first "
                    f"correct answer {correct:.0f} ms ({cpu:.0f} ms CPU; {warm:.0f} ms with "
                    f"--extender-warm-view), import floor {wall_ms:.0f} ms ({cpu_ms:.0f} ms CPU)",
                    flush=True,
                )
    return [
        {
            "package": name,
            "nodes": nodes,
            "pods": pods,
            **found[name],
            "build_ms": first_build_s * 1000,
            "next_build_ms": next_build_s * 1000,
        }
        for name in envs
    ]


def _verdict(ms: float) -> str:
    """Whether ``ms`` is within :data:`TARGET_MS`."""
    return "met" if ms <= TARGET_MS else "NOT met"


def render(
    results: list[dict[str, object]],
    parts: list[dict[str, float]],
    runs: int,
    baseline: str | None = None,
) -> str:
    load = " / ".join(f"{x:.1f}" for x in os.getloadavg())
    lines = [
        f"Date {datetime.now(UTC):%Y-%m-%d}; machine: {os.cpu_count()} cores, "
        f"{platform.system()} {platform.machine()}, Python {platform.python_version()}; load "
        f"average {load} at the end (other jobs share the cores); median of {runs} runs, each a "
        "fresh `serve` process on the same file"
        + (f"; the baseline is {baseline}, its starts alternated with these." if baseline else "."),
        "",
        "| nodes x 8 GPUs | package | pods | listening ms | first correct answer ms | its CPU ms "
        "| with --extender-warm-view ms | import floor ms | import floor CPU ms | view build ms, "
        "first / next (in process) |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    verdicts = []
    medians: dict[tuple[object, object], dict[str, float]] = {}
    for r in results:
        m = {
            key: statistics.median(r[key])  # type: ignore[arg-type]
            for key in (
                "listening_ms",
                "answer_ms",
                "answer_cpu_ms",
                "warm_ms",
                "import_ms",
                "import_cpu_ms",
            )
        }
        medians[r["nodes"], r["package"]] = m
        # The in-process builds ran this checkout's code only.
        builds = f"{r['build_ms']:.0f} / {r['next_build_ms']:.0f}"
        lines.append(
            f"| {r['nodes']:,} | {r['package']} | {r['pods']:,} | {m['listening_ms']:.0f} | "
            f"{m['answer_ms']:.0f} | {m['answer_cpu_ms']:.0f} | {m['warm_ms']:.0f} | "
            f"{m['import_ms']:.0f} | {m['import_cpu_ms']:.0f} | "
            f"{builds if r['package'] == CHECKOUT else '-'} |"
        )
        if r["nodes"] == 1024 and r["package"] == CHECKOUT:
            verdicts.append(
                f"At 1,024 nodes the first correct answer comes {m['answer_ms']:.0f} ms after "
                f"the spawn (target {TARGET_MS:.0f} ms: {_verdict(m['answer_ms'])}; "
                f"{m['warm_ms']:.0f} ms with --extender-warm-view: "
                f"{_verdict(m['warm_ms'])}), after "
                f"{m['answer_cpu_ms']:.0f} ms of the process's CPU time; the interpreter and "
                f"the imports `serve` needs take {m['import_ms']:.0f} ms "
                f"({m['import_cpu_ms']:.0f} ms CPU) in a bare process."
            )
    for (nodes, package), base in medians.items():
        ours = medians.get((nodes, CHECKOUT))
        if package != BASELINE or ours is None:
            continue
        verdicts.append(
            f"Against the baseline at {nodes:,} nodes: first correct answer "
            f"{base['answer_ms']:.0f} -> {ours['answer_ms']:.0f} ms (its CPU "
            f"{base['answer_cpu_ms']:.0f} -> {ours['answer_cpu_ms']:.0f} ms), import floor CPU "
            f"{base['import_cpu_ms']:.0f} -> {ours['import_cpu_ms']:.0f} ms."
        )
    lines += ["", *verdicts, "", *render_parts(parts), ""]
    lines.append(
        "Command: `.venv/bin/python bench/bench_extender_cold_start.py --nodes "
        + " ".join(str(n) for n in dict.fromkeys(r["nodes"] for r in results))
        + f" --runs {runs}"
        + (" --baseline DIR" if baseline else "")
        + " --record`."
    )
    return "\n".join(lines)


def render_parts(parts: list[dict[str, float]], shown: int = 12) -> list[str]:
    """The import floor by package (median of the runs), largest first."""
    names = {name for run in parts for name in run}
    ms = {name: statistics.median(run.get(name, 0.0) for run in parts) for name in names}
    ranked = sorted(ms, key=lambda name: -ms[name])
    lines = [
        f"Where the import floor goes (`-X importtime`, each module's own time by package, "
        f"median of {len(parts)} runs; {sum(ms.values()):.0f} ms in all):",
        "",
        "| package | ms |",
        "|---|---:|",
    ]
    lines += [f"| {name} | {ms[name]:.0f} |" for name in ranked[:shown]]
    rest = ranked[shown:]
    lines.append(f"| {len(rest)} others | {sum(ms[name] for name in rest):.0f} |")
    return lines


def record(text: str) -> None:
    write_block(DOCS, BEGIN, END, text, HEADING)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[1024, 5000])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument(
        "--baseline",
        type=Path,
        help="a directory holding another sits_observe package, timed alternately with this "
        "checkout (e.g. git archive HEAD sits_observe | tar -x -C DIR)",
    )
    parser.add_argument(
        "--baseline-name", default="", help="how the record names the baseline (a commit)"
    )
    parser.add_argument("--record", action="store_true", help="write docs/benchmarks.md")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as cache:
        envs = {CHECKOUT: bytecode_env(Path(cache) / "checkout")}
        if args.baseline is not None:
            if not (args.baseline / "sits_observe" / "__init__.py").is_file():
                parser.error(f"--baseline {args.baseline}: no sits_observe package in it")
            envs[BASELINE] = bytecode_env(Path(cache) / "baseline")
            envs[BASELINE]["PYTHONPATH"] = str(args.baseline.resolve())
        results = [r for n in args.nodes for r in measure(n, args.runs, envs)]
        parts = [import_parts_ms(envs[CHECKOUT]) for _ in range(args.runs)]
    named = args.baseline_name or (str(args.baseline) if args.baseline else None)
    text = render(results, parts, args.runs, named)
    print(text)
    if args.record:
        record(text)


if __name__ == "__main__":
    main()
