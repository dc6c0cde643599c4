"""Read commands made from report specs: one generator, the same flags everywhere.

Every report in :func:`sits_observe.lab.catalog.all_reports` (the product's and the lab's)
becomes a command with

- a source: ``--db FILE`` (read-only) or ``--service URL`` with a read token
  (``--token-file F`` or ``$SITS_TOKEN``); ``$SITS_DB`` / ``$SITS_SERVICE`` stand in for the
  flags;
- the window: ``--since DUR`` and ``--until now|newest|TIME`` (:mod:`sits_observe.reports.window`);
- the output: ``-o table|wide|json|yaml|csv`` (``--format`` is the same flag) and
  ``--columns``;
- one flag per field of the report's settings model (:func:`setting_options`): the field's
  description, default, bounds and unit make the help, and the model validates the values,
  so no default is copied into a command signature.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any

import typer

from sits_observe.lab.catalog import all_reports
from sits_observe.reports.result import Report
from sits_observe.reports.spec import ReportSpec
from sits_observe.surfaces.cli.common import run_cli
from sits_observe.surfaces.cli.flags import setting_options
from sits_observe.surfaces.cli.reports import heatmap_extras
from sits_observe.surfaces.cli.reports.output import print_report
from sits_observe.surfaces.cli.reports.reads import (
    COMMON_FLAGS,
    KUBE_FLAGS,
    PROMQL_FLAGS,
    common_parameters,
    kube_api_of,
    kube_parameters,
    promql_parameters,
    promql_reader,
    read_report,
)

#: What a command adds to the generated one: its own flags, and a step after printing
#: (``heatmap --png``) that gets the report and every flag's value.
AfterPrint = Callable[[Report, dict[str, Any]], None]


def make_command(
    spec: ReportSpec[Any],
    extra: Sequence[inspect.Parameter] = (),
    after: AfterPrint | None = None,
) -> Callable[..., None]:
    """The Typer command function of ``spec`` (its signature built from the flags)."""
    options = setting_options(spec.settings, reserved=(*COMMON_FLAGS, *PROMQL_FLAGS, *KUBE_FLAGS))
    fields = [p.name for p in options]
    promql = promql_parameters() if spec.promql is not None else []
    kube = kube_parameters() if spec.live is not None else []

    def command(**kwargs: Any) -> None:
        def go() -> None:
            reader = promql_reader(kwargs)
            api = kube_api_of(kwargs)
            try:
                report = read_report(
                    spec,
                    db=kwargs["db"],
                    service=kwargs["service"],
                    token_file=kwargs["token_file"],
                    since=kwargs["since"],
                    until=kwargs["until"],
                    values={f: kwargs[f] for f in fields},
                    promql=reader,
                    kube_api=api,
                )
            finally:
                if reader is not None:
                    reader.client.close()
                if api is not None:
                    api.close()
            names = [c for c in (kwargs["columns"] or "").split(",") if c.strip()]
            print_report(report, kwargs["output"], columns=names or None)
            if after is not None:
                after(report, kwargs)

        run_cli(go)

    command.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [*common_parameters(), *promql, *kube, *options, *extra]
    )
    command.__doc__ = spec.summary
    command.__name__ = f"{spec.name}_command"
    return command


#: Commands that only read (what ``kubectl sits`` offers).
READ_COMMANDS: tuple[str, ...] = tuple(all_reports())


#: Per report, the flags and after-print step its command adds (see :func:`make_command`).
COMMAND_EXTRAS: dict[str, tuple[Sequence[inspect.Parameter], AfterPrint | None]] = {
    "heatmap": heatmap_extras.EXTRAS,
}


def register(app: typer.Typer) -> None:
    """Add one command per report to ``app``."""
    for spec in all_reports().values():
        extra, after = COMMAND_EXTRAS.get(spec.name, ((), None))
        app.command(spec.name, help=spec.summary)(make_command(spec, extra, after))
