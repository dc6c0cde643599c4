"""How a one-shot file import ends: one exit-code rule for ``ingest dcgm``, ``ingest cgroup``
and ``ingest requests``.

==== =====================================================================================
exit meaning
==== =====================================================================================
0    everything read was stored.
2    nothing was stored: a bad flag, an unreadable source, or a source with nothing usable
     in it (not one row could be read: a truncated, garbage or empty file). The database is
     neither created nor touched, because each command parses its whole source before it
     opens the store.
3    rows were stored, but part of the input was rejected (or a value stored as NULL): the
     "rejected" table on stdout lists the reasons, and one line on stderr gives the count
     and the first rejected line.
==== =====================================================================================

A script can therefore tell "done", "nothing happened" and "done, but look at the input"
apart without parsing any output. The rule lives here once so that the commands cannot drift.

Every command stores what ``serve`` would store from the same rows: its batch goes through
:func:`sits_observe.store.intake.prepare` (the store's own screening) before the store is
opened, so a row stamped
more than ``--max-future-skew-s`` (300 s) after this host's clock is rejected as
``<table>.ts:future`` and one before 2000 as ``<table>.ts:too_old`` (as are values outside
the range rules), each reason counted among the rejections above and stored as a
``collector_drops`` row of collector ``ingest``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import typer

from sits_observe.errors import ParseError
from sits_observe.surfaces.cli.console import note

EXIT_STORED = 0
EXIT_NOTHING_STORED = 2
EXIT_PARTIAL = 3

#: Help of ``--max-future-skew-s`` on the commands that read timestamps from their input.
FUTURE_SKEW_HELP = (
    "seconds a row's timestamp may lie ahead of this host's clock; later rows are rejected "
    "(ts:future), as serve rejects them, and so are rows before 2000 (ts:too_old) (0-86400)"
)


@dataclass(frozen=True)
class IngestOutcome:
    """What one import stored and rejected.

    ``rejected`` counts by reason (as stored in ``collector_drops``); ``unit`` names what was
    counted (``samples``, ``rows or values``); ``first_rejected`` describes the first rejected
    line or entry, when the parser knows it.
    """

    stored_rows: int
    rejected: Mapping[str, int]
    unit: str
    first_rejected: str | None = None

    @property
    def rejected_total(self) -> int:
        """Rejections over every reason."""
        return sum(self.rejected.values())


def _detail(outcome: IngestOutcome) -> str:
    if not outcome.rejected:
        return ""
    reasons = ", ".join(f"{r}: {n}" for r, n in sorted(outcome.rejected.items()))
    first = "" if outcome.first_rejected is None else f"; first rejected {outcome.first_rejected}"
    return f" ({outcome.rejected_total} {outcome.unit} rejected: {reasons}{first})"


def require_rows(outcome: IngestOutcome, source: str, what: str, hint: str) -> None:
    """Raise :class:`ParseError` (exit 2, nothing stored) when ``outcome`` has no row.

    ``what`` names the rows (``GPU samples``), ``hint`` says what to check next.
    """
    if outcome.stored_rows == 0:
        raise ParseError(
            f"no {what} could be read from {source}{_detail(outcome)}; nothing was stored. {hint}"
        )


def finish(outcome: IngestOutcome) -> None:
    """End a command whose rows were stored: exit 3 with one line on stderr when part of the
    input was rejected, else return (exit 0)."""
    if outcome.rejected_total == 0:
        return
    first = "" if outcome.first_rejected is None else f"; first rejected {outcome.first_rejected}"
    note(
        f"{outcome.stored_rows} rows stored, {outcome.rejected_total} {outcome.unit} rejected "
        f"(reasons above){first}; exit code {EXIT_PARTIAL}",
        label="warning",
    )
    raise typer.Exit(code=EXIT_PARTIAL)
