"""The generated Grafana files: committed = generated, metric names exported, valid models."""

from __future__ import annotations

import csv
import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from prometheus_client.core import Metric
from typer.testing import CliRunner

from sits_observe.store import Store
from sits_observe.surfaces.cli.main import app as cli
from sits_observe.surfaces.grafana import (
    dashboards,
    differences,
    expand,
    names,
    queries,
    render,
    variable_queries,
    write,
)
from sits_observe.surfaces.grafana.panels import GRID_COLUMNS
from sits_observe.surfaces.grafana.promql import MODEL, sel
from sits_observe.surfaces.service import ServiceSettings, create_app
from sits_observe.surfaces.service.exporter.signals import labels as exporter_labels

REPO = Path(__file__).resolve().parents[3]
GRAFANA = REPO / "grafana"
METRIC = re.compile(r"\bsits_[a-z0-9_]+\b")
DCGM = re.compile(r"\bDCGM_FI_[A-Z0-9_]+\b")
#: Template variables of the dashboards with a value any series matches.
MATCH_ALL = {"model": ".*", "node": ".*", "namespace": ".*", "cluster": ".*"}

# Sample names a family of each type exposes (prometheus_client's exposition).
SUFFIXES = {
    "counter": ("_total", "_created"),
    "gauge": ("",),
    "histogram": ("_bucket", "_count", "_sum", "_created"),
    "gaugehistogram": ("_bucket", "_gcount", "_gsum"),
    "summary": ("", "_count", "_sum", "_created"),
    "info": ("_info",),
    "stateset": ("",),
    "unknown": ("",),
}


def sample_names(families: list[Metric]) -> set[str]:
    names = set()
    for family in families:
        names.update(family.name + suffix for suffix in SUFFIXES[family.type])
        names.update(sample.name for sample in family.samples)
    return names


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> set[str]:
    """Every sample name the service's /metrics can carry: its registry (own metrics and
    whatever the derived signals yield over an empty store) plus the exporter's describe()."""
    path = tmp_path_factory.mktemp("store") / "s.duckdb"
    with Store.open(path) as store:
        settings = ServiceSettings.model_validate({"token": "t", "retention_interval_s": 0})
        service = create_app(settings, store)
        exporter = service.state.exporter
        assert exporter is not None, "the derived-signal exporter is enabled by default"
        try:
            families = [*service.state.metrics.registry.collect(), *exporter.describe()]
        finally:
            exporter.close()  # no background pass may outlive the store
    return sample_names(families)


def all_expressions() -> Iterator[tuple[str, str, str]]:
    for model in dashboards().values():
        for q in [*queries(model), *variable_queries(model)]:
            yield q.dashboard, q.panel, q.expr


def test_committed_files_equal_the_generator_output() -> None:
    assert differences(GRAFANA) == [], "run `sits-observe grafana` to regenerate grafana/"


def test_every_metric_a_panel_queries_is_exported(exported: set[str]) -> None:
    used: dict[str, list[str]] = {}
    for board, panel, expr in all_expressions():
        for name in METRIC.findall(expr):
            used.setdefault(name, []).append(f"{board} / {panel}")
    assert used, "no sits_ metric found in any expression"
    missing = {name: where for name, where in sorted(used.items()) if name not in exported}
    assert not missing, "metrics the dashboards query but /metrics does not export:\n" + "\n".join(
        f"  {name}: {', '.join(sorted(set(where)))}" for name, where in missing.items()
    )


def test_every_expression_queries_a_sits_metric_and_only_known_variables() -> None:
    for board, panel, expr in all_expressions():
        assert METRIC.search(expr) or DCGM.search(expr), (board, panel, expr)
        expand(expr, MATCH_ALL)  # raises on an undefined $variable


def test_every_selector_is_scoped_by_the_cluster_variable() -> None:
    """A store of several clusters shows one: each sits_ / DCGM_FI_ selector of every panel
    and variable (but the cluster variable's own) matches ``cluster=~"$cluster"`` first."""
    selector = re.compile(r"\b((?:sits|DCGM_FI)_\w+)(\{[^}]*\})?")
    for model in dashboards().values():
        variables = [v["name"] for v in model["templating"]["list"]]
        assert variables[:2] == ["datasource", "cluster"], model["uid"]
        for q in [*queries(model), *variable_queries(model)]:
            if q.panel == "$cluster":
                continue
            for match in selector.finditer(q.expr):
                assert (match.group(2) or "").startswith('{cluster=~"$cluster"'), (q.panel, q.expr)


def test_node_and_gpu_labels_are_the_exporters_and_dcgm_exporters() -> None:
    """Panels group and join on the labels the exporter gives its series, which are
    dcgm-exporter's; the old ``node`` label (and ``gpu`` as a UUID) is gone."""
    assert names.NODE_LABEL == exporter_labels.NODE == "Hostname"
    assert (names.GPU_INDEX_LABEL, names.GPU_UUID_LABEL, names.MODEL_LABEL) == (
        exporter_labels.GPU_INDEX,
        exporter_labels.GPU_UUID,
        exporter_labels.MODEL,
    )
    for board, panel, expr in all_expressions():
        assert not re.search(r"\bnode=~|\(node\b|\bnode\)|\bnode,", expr), (board, panel, expr)


def counters_csv() -> set[str]:
    lines = (REPO / "collectors" / "dcgm-counters.csv").read_text(encoding="utf-8").splitlines()
    rows = csv.reader(ln for ln in lines if ln.strip() and not ln.lstrip().startswith("#"))
    return {row[0].strip() for row in rows}


def test_dcgm_panels_read_only_counters_the_agents_dcgm_exporter_collects() -> None:
    used = {name for _, _, expr in all_expressions() for name in DCGM.findall(expr)}
    assert used == {
        names.DCGM_GPU_UTIL,
        names.DCGM_SM_ACTIVE,
        names.DCGM_POWER,
        names.DCGM_GPU_TEMP,
        names.DCGM_XID,
    }
    assert used <= counters_csv(), used - counters_csv()


def test_the_attribution_dashboard_has_the_gpu_hardware_row_and_joins_on_the_gpu() -> None:
    model = dashboards()["attribution"]
    rows = [p["title"] for p in model["panels"] if p["type"] == "row"]
    assert "GPU hardware (dcgm-exporter)" in rows
    joins = [
        q.expr
        for q in queries(model)
        if METRIC.search(q.expr) and DCGM.search(q.expr) and " on (" in q.expr
    ]
    assert joins, "no panel joins a sits series with a dcgm-exporter one"
    for expr in joins:
        assert "on (cluster, Hostname, gpu, UUID)" in expr, expr


def test_dashboards_are_grafana_models_with_a_prometheus_datasource_variable() -> None:
    models = dashboards()
    assert set(models) == {
        "fleet-overview",
        "latency-throughput",
        "fragmentation",
        "attribution",
        "pod-start",
        "controller",
    }
    uids = [model["uid"] for model in models.values()]
    assert len(set(uids)) == len(uids)
    for stem, model in models.items():
        assert model["schemaVersion"] == 39, stem
        variables = {v["name"]: v for v in model["templating"]["list"]}
        ds = variables["datasource"]
        assert (ds["type"], ds["query"]) == ("datasource", "prometheus"), stem
        for v in variables.values():
            if v["type"] == "query":
                assert v["query"]["query"].startswith("label_values("), (stem, v["name"])
                assert v["datasource"]["uid"] == "${datasource}"
        for panel in model["panels"]:
            if panel["type"] == "row":
                continue
            assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
            assert panel["targets"], (stem, panel["title"])
            for target in panel["targets"]:
                assert target["datasource"]["uid"] == "${datasource}"
                # A variable used in an expression must be defined on the dashboard.
                for name in re.findall(r"\$(\w+)", target["expr"]):
                    assert name.startswith("__") or name in variables, (stem, name)


def test_panels_tile_the_grid_without_overlap() -> None:
    for stem, model in dashboards().items():
        taken: set[tuple[int, int]] = set()
        ids = [p["id"] for p in model["panels"]]
        assert len(set(ids)) == len(ids), stem
        for panel in model["panels"]:
            pos = panel["gridPos"]
            assert pos["x"] >= 0 and pos["x"] + pos["w"] <= GRID_COLUMNS, (stem, panel["title"])
            cells = {
                (pos["x"] + dx, pos["y"] + dy) for dx in range(pos["w"]) for dy in range(pos["h"])
            }
            assert not cells & taken, (stem, panel["title"])
            taken |= cells


def test_latency_dashboard_has_a_real_heatmap_over_the_window_histogram() -> None:
    model = dashboards()["latency-throughput"]
    (panel,) = [p for p in model["panels"] if p["type"] == "heatmap"]
    (target,) = panel["targets"]
    assert target["format"] == "heatmap" and target["legendFormat"] == "{{le}}"
    assert target["expr"] == (
        'sum by (le) (sits_request_latency_window_seconds_bucket{cluster=~"$cluster", '
        'model=~"$model"})'
    )
    assert panel["options"]["calculate"] is False
    assert panel["repeat"] == "model"


def test_provisioning_files_are_grafana_file_provisioning() -> None:
    files = render()
    ds = yaml.safe_load(files["provisioning/datasources/sits-observe.yaml"])
    assert ds["apiVersion"] == 1
    (source,) = ds["datasources"]
    assert source["type"] == "prometheus" and source["access"] == "proxy"
    boards = yaml.safe_load(files["provisioning/dashboards/sits-observe.yaml"])
    (provider,) = boards["providers"]
    assert provider["type"] == "file" and provider["options"]["path"]
    for stem in dashboards():
        assert json.loads(files[f"dashboards/{stem}.json"])["uid"].startswith("sits-")


def test_sel_and_expand_render_grafana_matchers() -> None:
    assert sel("m", model=MODEL, quantile="0.95") == 'm{model=~"$model", quantile="0.95"}'
    assert sel("m") == "m"
    expr = 'rate(m{model=~"${model}"}[$__rate_interval])'
    assert expand(expr, {"model": "a|b"}) == 'rate(m{model=~"a|b"}[1m])'
    with pytest.raises(KeyError, match="gpu"):
        expand("m{gpu=~'$gpu'}", {})


def test_check_fails_on_a_changed_file_and_passes_after_writing(tmp_path: Path) -> None:
    runner = CliRunner()
    missing = runner.invoke(cli, ["grafana", "--check", "--out", str(tmp_path)])
    assert missing.exit_code == 1 and "fleet-overview.json: missing" in missing.output
    wrote = runner.invoke(cli, ["grafana", "--out", str(tmp_path)])
    assert wrote.exit_code == 0, wrote.output
    assert runner.invoke(cli, ["grafana", "--check", "--out", str(tmp_path)]).exit_code == 0
    board = tmp_path / "dashboards" / "controller.json"
    board.write_text(board.read_text().replace("sits_quota", "sits_quotas"))
    (tmp_path / "dashboards" / "stale.json").write_text("{}")
    changed = runner.invoke(cli, ["grafana", "--check", "--out", str(tmp_path)])
    assert changed.exit_code == 1
    assert "controller.json: differs" in changed.output
    assert "stale.json: not generated" in changed.output


def test_write_creates_every_rendered_file(tmp_path: Path) -> None:
    written = write(tmp_path)
    assert sorted(p.relative_to(tmp_path).as_posix() for p in written) == sorted(render())


def test_every_expression_parses_in_promtool(tmp_path: Path) -> None:
    """Each expression (variables expanded) as a recording rule: ``promtool check rules``
    parses it with Prometheus's own PromQL parser."""
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool not installed (Debian package prometheus; see .ci/)")
    rules = [
        {"record": f"grafana:check_{i}", "expr": expand(expr, MATCH_ALL)}
        for i, (_, _, expr) in enumerate(all_expressions())
        if not expr.startswith("label_values(")
    ]
    path = tmp_path / "rules.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "grafana", "rules": rules}]}))
    result = subprocess.run(
        [promtool, "check", "rules", str(path)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_fragmentation_dashboard_counts_dra_gpus() -> None:
    """GPUs handed out through DRA are in the FGD panels (the inventory counts them) and in a
    row of their own: stranded memory slices, first fit's waste, consumable shares."""
    board = json.loads((GRAFANA / "dashboards" / "fragmentation.json").read_text())
    text = json.dumps(board)
    for family in (
        "sits_dra_memory_slices_free",
        "sits_dra_memory_slices_stranded",
        "sits_dra_first_fit_wasted_slices",
        "sits_dra_shared_free_bytes",
        "sits_dra_shared_stranded_bytes",
    ):
        assert family in text, family
    rows = [p["title"] for p in board["panels"] if p.get("type") == "row"]
    assert "DRA devices" in rows
