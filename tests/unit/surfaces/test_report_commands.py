"""Settings make flags: the generator behind every read command, and the one renderer."""

from __future__ import annotations

from enum import StrEnum

import pytest
from pydantic import BaseModel, ConfigDict, Field
from typer.testing import CliRunner

from sits_observe.domain.validation import validate_settings
from sits_observe.errors import ConfigError, UnknownNameError
from sits_observe.lab.catalog import all_reports
from sits_observe.reports.registry import find_report
from sits_observe.reports.result import col, table_of
from sits_observe.surfaces.cli.flags import field_help, option_names, setting_options
from sits_observe.surfaces.cli.main import app
from sits_observe.surfaces.cli.reports.output import Output, pick_columns

REPORTS = all_reports()
REPORTS_ALL = all_reports()


class Mode(StrEnum):
    fast = "fast"
    slow = "slow"


class Demo(BaseModel):
    model_config = ConfigDict(frozen=True)

    skew_s: float = Field(2.0, gt=0, le=3600, description="largest skew")
    mode: Mode = Field(Mode.fast, description="how")
    raw: bool = Field(False, description="every sample")
    names: list[str] = Field(default_factory=list, description="names to keep")
    mapping: dict[str, float] = Field(default_factory=dict, description="not a flag")


def test_each_simple_field_becomes_one_option_with_default_bounds_and_unit() -> None:
    params = {p.name: p for p in setting_options(Demo)}
    assert list(params) == ["skew_s", "mode", "raw", "names"]  # the mapping comes from a file
    assert field_help("skew_s", Demo.model_fields["skew_s"]) == (
        "largest skew [default 2.0; > 0; <= 3600; seconds]"
    )
    assert params["raw"].default.param_decls == ("--raw/--no-raw",)
    assert all(p.default.default is None for p in params.values())  # the model's default wins
    # A field may name its flags, a short alias first: json_schema_extra={"flags": [...]}.
    recommend = {p.name: p for p in setting_options(find_report("recommend", REPORTS_ALL).settings)}
    assert recommend["namespace"].default.param_decls == ("-n", "--namespace")


def test_validation_is_one_line_naming_each_flag() -> None:
    with pytest.raises(ConfigError) as caught:
        validate_settings(Demo, {"skew_s": "0", "mode": "warp"}, what="demo")
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith("invalid demo settings: --skew-s:") and "--mode:" in message
    assert validate_settings(Demo, {"skew_s": "5", "raw": None}, what="demo").skew_s == 5
    # One ?names=a of a query string is a list of one, as --names a is on the command line.
    assert validate_settings(Demo, {"names": "a"}, what="demo").names == ["a"]
    assert validate_settings(Demo, {"names": ["a", "b"]}, what="demo").names == ["a", "b"]


def test_every_report_has_a_command_whose_help_lists_its_settings() -> None:
    runner = CliRunner()
    for name, spec in REPORTS.items():
        outcome = runner.invoke(app, [name, "--help"], env={"COLUMNS": "200"})
        assert outcome.exit_code == 0, outcome.output
        for flag in ("--db", "--service", "--since", "--until", "--output", "--columns"):
            assert flag in outcome.output, (name, flag)
        for param in setting_options(spec.settings):
            for flag in option_names(param):  # a nested field's: --heatmap-bin-s
                assert flag in outcome.output, (name, param.name, flag)


def test_unknown_report_and_column_names_list_what_exists() -> None:
    with pytest.raises(UnknownNameError, match="the reports are"):
        find_report("nope", REPORTS_ALL)
    table = table_of("t", "t", [{"a": 1, "b": 2}], (col("a", "alpha"), col("b", "beta", wide=True)))
    assert [c.name for c in pick_columns(table, Output.table, None)] == ["a"]
    assert [c.name for c in pick_columns(table, Output.wide, None)] == ["a", "b"]
    assert [c.name for c in pick_columns(table, Output.table, ["BETA", "a"])] == ["b", "a"]
    with pytest.raises(UnknownNameError, match="it has a, b"):
        pick_columns(table, Output.table, ["c"])


def test_a_source_is_required_and_a_missing_file_is_named(tmp_path) -> None:  # type: ignore[no-untyped-def]
    runner = CliRunner()
    outcome = runner.invoke(app, ["smf"], env={"SITS_DB": "", "SITS_SERVICE": ""})
    assert outcome.exit_code == 2 and "give one source" in outcome.stderr
    outcome = runner.invoke(app, ["smf", "--db", str(tmp_path / "absent.duckdb")])
    assert outcome.exit_code == 2 and "does not exist" in outcome.stderr
    outcome = runner.invoke(app, ["smf", "--service", "http://127.0.0.1:1"], env={"SITS_TOKEN": ""})
    assert outcome.exit_code == 2 and "needs a read token" in outcome.stderr
