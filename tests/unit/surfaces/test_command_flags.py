"""Settings make flags for the long-running and simulation commands too: every settings flag
of ``serve``, ``agent``, ``controller``, ``simulate``, ``experiment``, ``ui`` and ``demo``
comes from its model (name, default, bounds, unit), and no flag the command declares itself
carries a default of its own."""

from __future__ import annotations

import inspect
import os
from pathlib import Path
from typing import Any, Literal, NoReturn

import pytest
import typer
from pydantic import BaseModel, Field
from typer.testing import CliRunner

from sits_observe.errors import ConfigError
from sits_observe.surfaces.cli import agent, controller, serve, ui
from sits_observe.surfaces.cli.flags import (
    SettingFlags,
    field_help,
    flag_type,
    option_names,
    setting_options,
    with_flags,
)
from sits_observe.surfaces.cli.lab import demo, experiment, simulate
from sits_observe.surfaces.cli.main import app
from sits_observe.surfaces.cli.reference import root, walk

#: Per command, the models its settings flags come from.
GROUPS: dict[str, tuple[SettingFlags[Any], ...]] = {
    "serve": (
        serve.SERVICE,
        serve.LIMITS,
        serve.EXPORTER,
        serve.ALERTING,
        serve.NOTIFY,
        serve.CONTROLLER,
        serve.EXTENDER,
        serve.LOG,
    ),
    "agent": (agent.AGENT, agent.METRICS, agent.TOPOLOGY, agent.LOG),
    "controller": (controller.CONTROLLER, controller.METRICS, controller.LOG),
    "simulate": (simulate.REPLAY, simulate.RUN),
    "experiment": (experiment.EXPERIMENT,),
    "ui": (ui.SERVER, ui.PAGES),
    "demo": (demo.DEMO,),
}
#: The defaults a command's own flags may have: none, off, required, or an empty list.
NO_DEFAULT: tuple[object, ...] = (None, False, [], ())
#: Own flags with a default, and why it is no setting: an output format, a switch that is
#: on, a directory no model holds (the agent's spool is where the DaemonSet mounts it).
OWN_DEFAULTS = {
    ("simulate", "fmt"),
    ("experiment", "fmt"),
    ("controller", "leader_election"),
    ("agent", "spool_dir"),
    ("demo", "ui"),
}
COMMANDS = dict(walk(root()))


def _options(command: Any) -> dict[str, Any]:
    """The options of a Click command (Typer's own Click), by parameter name."""
    return {p.name: p for p in command.params if p.param_type_name == "option" and p.name}


@pytest.mark.parametrize("name", list(GROUPS))
def test_every_settings_field_is_a_flag_with_the_models_help(name: str) -> None:
    options = _options(COMMANDS[name])
    for group in GROUPS[name]:
        selected = group.fields()
        for field_name, field in group.model.model_fields.items():
            if flag_type(field) is None or field_name in group.skip:
                continue
            if group.only is not None and field_name not in group.only:
                continue
            assert field_name in selected
            param = f"{group.prefix}_{field_name}" if group.prefix else field_name
            option = options[param]
            assert group.flag(field_name) in option.opts, (name, field_name, option.opts)
            assert option.help == field_help(field_name, field), (name, field_name)
            assert option.default is None, (name, field_name)  # the model's default wins
            if not field.is_required() and field.default not in (None, (), ""):
                assert "[default " in (option.help or ""), (name, field_name)


@pytest.mark.parametrize("name", list(GROUPS))
def test_no_flag_of_the_command_itself_has_a_default(name: str) -> None:
    generated = {p.name for group in GROUPS[name] for p in group.options() if p.name is not None}
    fields = {f for group in GROUPS[name] for f in group.model.model_fields}
    for option in _options(COMMANDS[name]).values():
        if option.name in generated or option.name == "help":
            continue
        assert option.name not in fields or option.required or option.default is None, (
            f"{name} --{option.name} is a settings field declared by hand"
        )
        if (name, option.name) not in OWN_DEFAULTS:
            assert option.required or option.default in NO_DEFAULT, (
                f"{name} {option.opts} has a hand-written default {option.default!r}"
            )


@pytest.mark.parametrize("name", list(GROUPS))
def test_help_fits_80_columns(name: str) -> None:
    outcome = CliRunner().invoke(app, [name, "--help"], env={"COLUMNS": "80"}, terminal_width=80)
    assert outcome.exit_code == 0, outcome.output
    assert max(len(line) for line in outcome.output.splitlines()) <= 80
    for group in GROUPS[name]:
        if group.panel:
            assert f"\n{group.panel}:\n" in outcome.output  # each model's flags under its heading


# -- the generator -------------------------------------------------------------------------


class Knobs(BaseModel):
    share_ratio: float = Field(0.5, ge=0, le=1, description="a share")
    below_ratio: float = Field(0.1, ge=0, lt=1, description="a share below one")
    load_ratio: float = Field(1.3, gt=0, le=10, description="a multiple of capacity")
    open_ratio: float = Field(2.0, gt=0, description="unbounded")
    rate_bytes_per_s: float = Field(1e9, gt=0, description="a rate")
    tie: Literal["first", "random"] = Field("first", description="how to break ties")
    ddof: Literal[0, 1] = Field(1, description="delta degrees of freedom")
    slo_s: float = Field(
        1.0,
        gt=0,
        le=3600,
        description="an SLO",
        json_schema_extra={"flag": "--slo-ms", "flag_scale": 1000, "unit": "milliseconds"},
    )
    enabled: bool = Field(True, description="on", json_schema_extra={"flag": "--knobs"})


def test_a_ratio_is_labelled_0_1_only_when_its_bounds_keep_it_there() -> None:
    fields = Knobs.model_fields
    assert field_help("share_ratio", fields["share_ratio"]).endswith("<= 1; 0-1]")
    assert field_help("below_ratio", fields["below_ratio"]).endswith("< 1; 0-1]")
    assert field_help("load_ratio", fields["load_ratio"]) == (
        "a multiple of capacity [default 1.3; > 0; <= 10; x]"
    )
    assert field_help("open_ratio", fields["open_ratio"]).endswith("> 0; x]")
    # A rate per second is not a duration.
    assert field_help("rate_bytes_per_s", fields["rate_bytes_per_s"]).endswith("bytes/s]")


def _run(flags: SettingFlags[Any], *args: str) -> tuple[int, str, Knobs | None]:
    seen: list[Knobs] = []

    @with_flags(flags)
    def command(**given: Any) -> None:
        try:
            seen.append(flags.validate(given, what="knob"))
        except ConfigError as exc:
            typer.echo(str(exc))
            raise typer.Exit(2) from exc

    tiny = typer.Typer(rich_markup_mode=None, pretty_exceptions_enable=False)
    tiny.command()(command)
    outcome = CliRunner().invoke(tiny, list(args))
    return outcome.exit_code, outcome.output, seen[0] if seen else None


def test_a_literal_field_takes_one_of_its_choices() -> None:
    flags = SettingFlags(Knobs)
    code, output, knobs = _run(flags, "--tie", "random", "--ddof", "0")
    assert code == 0, output
    assert knobs is not None and knobs.tie == "random" and knobs.ddof == 0
    code, output, _ = _run(flags, "--tie", "sideways")
    assert code == 2 and "'sideways' is not one of 'first', 'random'" in output
    _, help_text, _ = _run(flags, "--help")
    assert "<first|random>" in help_text and "<0|1>" in help_text


def test_a_scaled_flag_takes_its_own_unit_and_checks_the_bounds_in_it() -> None:
    flags = SettingFlags(Knobs)
    assert field_help("slo_s", Knobs.model_fields["slo_s"]) == (
        "an SLO [default 1000; > 0; <= 3600000; milliseconds]"
    )
    code, output, knobs = _run(flags, "--slo-ms", "2500")
    assert code == 0, output
    assert knobs is not None and knobs.slo_s == 2.5
    code, output, _ = _run(flags, "--slo-ms", "4000000")
    assert code == 2 and "4e+06 must be <= 3600000" in output


def test_a_prefix_names_the_flags_and_the_errors_but_not_a_fields_own_flag() -> None:
    flags = SettingFlags(Knobs, prefix="knob", only=("share_ratio", "enabled"))
    params = {p.name: p for p in flags.options()}
    assert set(params) == {"knob_share_ratio", "knob_enabled"}
    assert params["knob_share_ratio"].default.param_decls == ("--knob-share-ratio",)
    assert params["knob_enabled"].default.param_decls == ("--knobs/--no-knobs",)
    code, output, knobs = _run(flags, "--no-knobs", "--knob-share-ratio", "0.25")
    assert code == 0, output
    assert knobs is not None and not knobs.enabled and knobs.share_ratio == 0.25
    code, output, _ = _run(flags, "--knob-share-ratio", "2")
    assert code == 2 and "invalid knob settings: --knob-share-ratio: " in output


def test_a_generated_flag_may_not_take_a_name_the_command_uses() -> None:
    def command(*, knobs: bool = typer.Option(False, "--knobs"), **flags: Any) -> None: ...

    with pytest.raises(ValueError, match="--knobs is the flag of both knobs and enabled"):
        with_flags(SettingFlags(Knobs, only=("enabled",)))(command)
    with pytest.raises(ValueError, match="shadows"):
        setting_options(Knobs, reserved=("tie",))
    own = inspect.Parameter(
        "x", inspect.Parameter.KEYWORD_ONLY, default=typer.Option(None, "--x/--no-x")
    )
    assert option_names(own) == ["--x", "--no-x"]


# -- the commands use what the flags say ------------------------------------------------------


def test_serve_builds_every_model_from_its_flags(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    captured: dict[str, Any] = {}

    def fake_run_service(settings: Any, **kw: Any) -> None:
        captured.update(kw, settings=settings)

    monkeypatch.setattr(serve, "run_service", fake_run_service)
    args = ["serve", "--db", str(tmp_path / "s.duckdb"), "--keep-alive-s", "9"]
    args += ["--inventory-interval-s", "12", "--read-max-rows", "500"]
    args += ["--exporter-max-models", "7", "--log-level", "warning"]
    outcome = CliRunner().invoke(app, args, env={"SITS_TOKEN": "abc"})
    assert outcome.exit_code == 0, outcome.output
    settings = captured["settings"]
    assert settings.http.keep_alive_s == 9 and settings.inventory_interval_s == 12
    assert settings.read_max_rows == 500 and settings.db_path == tmp_path / "s.duckdb"
    assert captured["exporter"].max_models == 7 and captured["log_level"] == "warning"
    assert captured["controller_settings"].mode.value == "dry-run"
    outcome = CliRunner().invoke(app, [*args[:3], "--log-level", "loud"])
    assert outcome.exit_code == 2 and "'loud' is not one of" in outcome.output


def test_the_experiment_takes_arms_comma_separated_or_repeated() -> None:
    flags = experiment.EXPERIMENT
    one = flags.validate({"arms": ["kube-default,kube-sits-nobind"]}, what="experiment")
    two = flags.validate({"arms": ["kube-default", "kube-sits-nobind"]}, what="experiment")
    assert one.arms == two.arms == ("kube-default", "kube-sits-nobind")
    with pytest.raises(ConfigError, match=r"--arms: .*unknown arm 'nope'"):
        flags.validate({"arms": ["kube-default,nope"]}, what="experiment")


def test_ui_passes_the_page_flags_to_the_app(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "x.duckdb"
    db.touch()
    execs: list[list[str]] = []

    def fake_execv(path: str, argv: list[str]) -> NoReturn:
        execs.append(argv)
        raise SystemExit(0)

    monkeypatch.setattr(os, "execv", fake_execv)
    args = ["ui", "--db", str(db), "--port", "8600", "--slo-ms", "250"]
    args += ["--trace-nodes", "n.csv", "--since", "1h"]
    outcome = CliRunner().invoke(app, args)
    assert outcome.exit_code == 0, outcome.output
    (argv,) = execs
    assert argv[argv.index("--server.port") + 1] == "8600"
    app_args = argv[argv.index("--") + 1 :]
    assert app_args == [
        "--db",
        str(db),
        "--since",
        "1h",
        "--slo-ms",
        "250.0",
        "--trace-nodes",
        "n.csv",
    ]
    outcome = CliRunner().invoke(app, ["ui", "--db", str(db), "--port", "0"])
    assert outcome.exit_code == 2 and "--port: " in outcome.output


class Outer(BaseModel):
    level: int = Field(1, ge=0, description="a level")
    knobs: Knobs = Field(
        default_factory=Knobs,
        description="nested knobs",
        json_schema_extra={"nested_flags": True, "nested_skip": ["tie"]},
    )
    plain: Knobs = Field(default_factory=Knobs, description="nested, from a file only")


def test_a_nested_model_gives_flags_under_its_field_when_asked() -> None:
    flags = SettingFlags(Outer, prefix="o")
    params = {p.name: p for p in flags.options()}
    assert "o_knobs__share_ratio" in params and "o_level" in params
    assert params["o_knobs__share_ratio"].default.param_decls == ("--o-knobs-share-ratio",)
    assert "o_knobs__tie" not in params  # nested_skip
    assert not any(name.startswith("o_plain") for name in params)  # not asked for
    assert flags.flag("knobs__share_ratio") == "--o-knobs-share-ratio"
    seen: list[Outer] = []

    @with_flags(flags)
    def command(**given: Any) -> None:
        try:
            seen.append(flags.validate(given, what="outer"))
        except ConfigError as exc:
            typer.echo(str(exc))
            raise typer.Exit(2) from exc

    tiny = typer.Typer(rich_markup_mode=None, pretty_exceptions_enable=False)
    tiny.command()(command)
    outcome = CliRunner().invoke(tiny, ["--o-knobs-share-ratio", "0.25", "--o-level", "3"])
    assert outcome.exit_code == 0, outcome.output
    assert seen[0].level == 3 and seen[0].knobs.share_ratio == 0.25
    assert seen[0].knobs.load_ratio == 1.3  # the rest of the nested model keeps its defaults
    outcome = CliRunner().invoke(tiny, ["--o-knobs-share-ratio", "2"])
    assert outcome.exit_code == 2
    assert "invalid outer settings: --o-knobs-share-ratio: " in outcome.output


def test_nested_values_come_keyed_by_their_path_from_a_query_too() -> None:
    from sits_observe.domain.validation import validate_settings

    outer = validate_settings(
        Outer, {"knobs.share_ratio": "0.5", "knobs__tie": "random", "level": None}, what="q"
    )
    assert outer.knobs.share_ratio == 0.5 and outer.knobs.tie == "random" and outer.level == 1
    with pytest.raises(ConfigError, match=r"--knobs-share-ratio: "):
        validate_settings(Outer, {"knobs__share_ratio": 5}, what="q")


def test_serve_passes_the_extender_flags_to_the_extender(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    captured: dict[str, Any] = {}
    monkeypatch.setattr(serve, "run_service", lambda settings, **kw: captured.update(kw))
    args = ["serve", "--db", str(tmp_path / "s.duckdb"), "--no-extender-gpu-hint"]
    args += ["--extender-view-refresh-interval-s", "1.5"]
    args += [
        "--extender-scoring-unknown-nodes",
        "fail",
        "--extender-scoring-nvlink-distance",
        "0.2",
    ]
    outcome = CliRunner().invoke(app, args, env={"SITS_TOKEN": "abc"})
    assert outcome.exit_code == 0, outcome.output
    extender = captured["extender"]
    assert not extender.gpu_hint and extender.view.refresh_interval_s == 1.5
    assert extender.scoring.unknown_nodes == "fail" and extender.scoring.nvlink_distance == 0.2
    assert extender.scoring.fragmentation_weight == 0.5  # untouched: the model's default
    outcome = CliRunner().invoke(
        app, [*args[:3], "--extender-scoring-fragmentation-weight", "3"], env={"SITS_TOKEN": "a"}
    )
    assert outcome.exit_code == 2
    assert "--extender-scoring-fragmentation-weight: " in outcome.output
