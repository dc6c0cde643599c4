"""The one window rule: --since / --until parsed, resolved and printed the same everywhere."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from sits_observe.errors import ConfigError, NoDataError
from sits_observe.reports.window import Window, WindowRequest, empty_window_message, resolve

NOW = datetime(2026, 12, 1, 12, 0, 0)
NEWEST = datetime(2026, 11, 30, 8, 30, 15, 250_000)


def test_defaults_are_everything_up_to_now() -> None:
    window = resolve(WindowRequest.parse(None, None), newest=NEWEST, now=NOW)
    assert window == Window(None, NOW, "now")
    assert window.seconds is None


def test_since_counts_back_from_until_now_newest_or_a_time() -> None:
    now = resolve(WindowRequest.parse("2h", "now"), newest=NEWEST, now=NOW)
    assert (now.since, now.until) == (NOW - timedelta(hours=2), NOW)
    newest = resolve(WindowRequest.parse("90s", "newest"), newest=NEWEST, now=NOW)
    # The newest sample itself is in the window (until is exclusive).
    assert newest.since is not None and newest.since < NEWEST < newest.until
    assert newest.until - NEWEST == timedelta(microseconds=1)
    assert newest.seconds == 90
    given = resolve(WindowRequest.parse("1h30m", "2026-11-30T10:00:00+02:00"), newest=None, now=NOW)
    assert given.until == datetime(2026, 11, 30, 8, 0, 0) and given.rule == "given"
    assert given.seconds == 5400


def test_zone_aware_now_is_stored_as_naive_utc() -> None:
    aware = datetime(2026, 12, 1, 14, 0, tzinfo=timezone(timedelta(hours=2)))
    assert resolve(WindowRequest(), newest=None, now=aware).until == NOW
    assert resolve(WindowRequest(), newest=None, now=NOW.replace(tzinfo=UTC)).until == NOW


@pytest.mark.parametrize(
    ("since", "until", "needle"),
    [
        ("yesterday", None, "--since 'yesterday' is not a positive duration"),
        ("0s", None, "not a positive duration"),
        (None, "tomorrow", "--until 'tomorrow' is not now, newest or an ISO-8601 time"),
    ],
)
def test_bad_words_are_one_line_config_errors(
    since: str | None, until: str | None, needle: str
) -> None:
    with pytest.raises(ConfigError, match=needle):
        WindowRequest.parse(since, until)


def test_newest_of_no_data_is_a_no_data_error() -> None:
    with pytest.raises(NoDataError, match="holds no rows"):
        resolve(WindowRequest.parse("1h", "newest"), newest=None, now=NOW)


def test_the_window_round_trips_through_json_and_says_how_it_was_chosen() -> None:
    window = resolve(WindowRequest.parse("2h", "now"), newest=None, now=NOW)
    doc = window.as_dict()
    assert doc == {
        "since": "2026-12-01T10:00:00Z",
        "until": "2026-12-01T12:00:00Z",
        "until_rule": "now",
        "seconds": 7200.0,
    }
    assert Window.from_dict(doc) == window
    assert window.describe() == "2026-12-01T10:00:00Z .. 2026-12-01T12:00:00Z (until now)"


def test_query_parameters_carry_the_request_unresolved() -> None:
    assert WindowRequest.parse("15m", "newest").query() == {"since": "900s", "until": "newest"}
    given = WindowRequest.parse(None, "2026-11-30T10:00:00Z")
    assert given.query() == {"until": "2026-11-30T10:00:00Z"}
    assert WindowRequest.parse(None, given.query()["until"]) == given


def test_an_empty_window_before_the_data_points_at_until_newest() -> None:
    window = resolve(WindowRequest.parse("1h", "now"), newest=NEWEST, now=NOW)
    message = empty_window_message(window, "gpu_samples rows", NEWEST)
    assert "the newest is at 2026-11-30T08:30:15Z: try --until newest" in message
    inside = resolve(WindowRequest.parse("1h", "newest"), newest=NEWEST, now=NOW)
    assert "try --until newest" not in empty_window_message(inside, "rows", NEWEST)
