"""The one time-window rule every report, command and page follows.

A user asks for a window with two words, the same everywhere:

- ``since``: how far back, a duration (``90s``, ``15m``, ``2h``, ``7d``, ``1h30m``); none means
  all the data there is.
- ``until``: where the window ends: ``now`` (the default, the wall clock), ``newest`` (the
  newest sample of the data the report reads, so a database copied off a cluster yesterday
  answers as it did then) or an ISO-8601 time (``2026-12-01T10:00:00Z``).

:func:`resolve` turns that request into a :class:`Window` of two zone-less UTC datetimes (the
form every ``TIMESTAMP`` column holds), ``since <= ts < until``. Every report carries the
window it used, prints it on stderr and puts it in its JSON, so two commands asked for the
same ``--since`` / ``--until`` can be checked to have read the same rows.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sits_observe.errors import ConfigError, NoDataError
from sits_observe.store.rows import in_window_params

#: The words ``until`` takes besides a time.
UNTIL_WORDS = ("now", "newest")

_DURATION = re.compile(r"(\d+(?:\.\d+)?)([smhdw])")
_UNIT_S = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}


def parse_duration_s(text: str, flag: str = "--since") -> float:
    """Seconds in ``90``, ``30s``, ``15m``, ``2h``, ``7d``, ``1w`` or sums like ``1h30m``;
    anything else (or a non-positive value) is a :class:`ConfigError` naming ``flag``."""
    cleaned = text.strip().lower()
    try:
        value = float(cleaned)
    except ValueError:
        value = -1.0
        if cleaned and _DURATION.sub("", cleaned) == "":
            value = sum(float(n) * _UNIT_S[u] for n, u in _DURATION.findall(cleaned))
    if not value > 0:
        raise ConfigError(
            f"{flag} {text!r} is not a positive duration; use e.g. 90, 30s, 15m, 2h, 7d, 1h30m"
        )
    return value


def parse_time(text: str, flag: str = "--until") -> datetime:
    """An ISO-8601 time (``2026-01-02T03:04:05``, ``...Z`` or with an offset) as naive UTC;
    a time without a zone is read as UTC."""
    try:
        value = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError as exc:
        raise ConfigError(
            f"{flag} {text!r} is not now, newest or an ISO-8601 time (2026-01-02T03:04:05Z)"
        ) from exc
    return to_utc_naive(value)


def to_utc_naive(ts: datetime) -> datetime:
    """``ts`` as a zone-less UTC datetime (a naive ``ts`` is taken as UTC already)."""
    return ts if ts.tzinfo is None else ts.astimezone(UTC).replace(tzinfo=None)


def utc_text(ts: datetime | None) -> str | None:
    """``2026-12-01T10:00:00Z``: UTC to the second, as every report prints times."""
    if ts is None:
        return None
    return to_utc_naive(ts).replace(microsecond=0).isoformat() + "Z"


@dataclass(frozen=True)
class WindowRequest:
    """What the user asked for: ``since_s`` seconds back (None = everything) from ``until``
    (``now``, ``newest`` or a naive-UTC time)."""

    since_s: float | None = None
    until: str | datetime = "now"

    @classmethod
    def parse(cls, since: str | None, until: str | None) -> WindowRequest:
        """From the flag texts (``--since 2h --until newest``); None = the defaults."""
        since_s = None if since is None or since == "" else parse_duration_s(since)
        word = "now" if until is None or until == "" else until.strip().lower()
        return cls(since_s, word if word in UNTIL_WORDS else parse_time(until or ""))

    def query(self) -> dict[str, str]:
        """The request as query parameters (``since=7200s&until=newest``), for the service."""
        params: dict[str, str] = {}
        if self.since_s is not None:
            params["since"] = f"{self.since_s:g}s"
        until = self.until
        params["until"] = until if isinstance(until, str) else utc_text(until) or "now"
        return params


@dataclass(frozen=True)
class Window:
    """The rows a report read: ``since <= ts < until`` (naive UTC; ``since`` None = from the
    first row). ``rule`` says how ``until`` was chosen: ``now``, ``newest`` or ``given``."""

    since: datetime | None
    until: datetime
    rule: str

    @property
    def params(self) -> list[object]:
        """The parameters of one :data:`sits_observe.store.rows.IN_WINDOW` condition."""
        return in_window_params(self.since, self.until)

    @property
    def seconds(self) -> float | None:
        """Length of the window (None when it is open at the start)."""
        return None if self.since is None else (self.until - self.since).total_seconds()

    def describe(self) -> str:
        """``2026-12-01T09:00:00Z .. 2026-12-01T10:00:00Z (until newest sample)``."""
        start = utc_text(self.since) or "first sample"
        rule = {"now": "until now", "newest": "until the newest sample", "given": "as given"}
        return f"{start} .. {utc_text(self.until)} ({rule.get(self.rule, self.rule)})"

    def as_dict(self) -> dict[str, Any]:
        """The window for JSON: times as ISO-8601 UTC strings."""
        return {
            "since": utc_text(self.since),
            "until": utc_text(self.until),
            "until_rule": self.rule,
            "seconds": self.seconds,
        }

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> Window:
        """The inverse of :meth:`as_dict` (a window read back from the service's JSON)."""
        since = doc.get("since")
        return cls(
            None if since is None else parse_time(since, "window.since"),
            parse_time(doc["until"], "window.until"),
            str(doc.get("until_rule", "given")),
        )


def resolve(request: WindowRequest, *, newest: datetime | None, now: datetime) -> Window:
    """The window ``request`` means, given the ``newest`` sample of the data a report reads
    and the wall clock ``now``.

    ``until=newest`` ends the window just after the newest sample, so that sample is in it;
    with no data at all that is a :class:`NoDataError`.
    """
    if request.until == "newest":
        if newest is None:
            raise NoDataError("--until newest: the data this report reads holds no rows yet")
        until = to_utc_naive(newest) + timedelta(microseconds=1)
        rule = "newest"
    elif request.until == "now":
        until, rule = to_utc_naive(now), "now"
    else:
        assert isinstance(request.until, datetime)
        until, rule = to_utc_naive(request.until), "given"
    since = None if request.since_s is None else until - timedelta(seconds=request.since_s)
    return Window(since, until, rule)


def empty_window_message(window: Window, what: str, newest: datetime | None) -> str:
    """Why a window holds nothing, and what to try: the newest sample when it lies before
    the window (a copied database read ``--until now``)."""
    text = f"no {what} in the window {window.describe()}"
    if newest is not None and window.since is not None and to_utc_naive(newest) < window.since:
        text += f"; the newest is at {utc_text(newest)}: try --until newest"
    return text
