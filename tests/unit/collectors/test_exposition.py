"""The Prometheus text reader: exact reads, every drop reason, and two properties
(generated samples survive a render/parse round trip; arbitrary text never raises)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sits_observe.collectors.exposition import (
    BLANK_VALUE,
    DUPLICATE_SERIES,
    MALFORMED_LINE,
    MALFORMED_TIMESTAMP,
    MALFORMED_VALUE,
    Sample,
    parse_exposition,
    parse_labels,
    read_value,
)


def test_reads_names_labels_values_timestamps_and_types() -> None:
    text = (
        "# HELP up Whether the target is up.\n"
        "# TYPE up gauge\n"
        'up{job="a",instance="h:1"} 1\n'
        "plain_metric 2.5 1700000000000\n"
        'esc{v="a\\"b\\\\c\\nd"} -3e2\n'
        "# just a comment\n"
        "\n"
    )
    result = parse_exposition(text)
    assert result.samples == [
        Sample("up", (("job", "a"), ("instance", "h:1")), 1.0, None),
        Sample("plain_metric", (), 2.5, 1_700_000_000_000),
        Sample("esc", (("v", 'a"b\\c\nd'),), -300.0, None),
    ]
    assert result.types == {"up": "gauge"}
    assert not result.dropped
    assert result.samples[0].label("instance") == "h:1"
    assert result.samples[0].label("missing", "x") == "x"


def test_special_values_are_returned_as_written() -> None:
    result = parse_exposition('a{x="1"} NaN\na{x="2"} +Inf\na{x="3"} -Inf\n')
    values = [s.value for s in result.samples]
    assert math.isnan(values[0]) and values[1] == math.inf and values[2] == -math.inf


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ('bad name{a="1"} 1', MALFORMED_LINE),
        ('m{a="1" b="2"} 1', MALFORMED_LINE),  # no comma between labels
        ("m{a=1} 1", MALFORMED_LINE),  # unquoted label value
        ('m{a="1"', MALFORMED_LINE),  # no closing brace
        ('m{a="1"} 1 2 3', MALFORMED_LINE),
        ('m{a="1"} one', MALFORMED_VALUE),
        ('m{a="1"} 1 soon', MALFORMED_TIMESTAMP),
        ('m{a="1"}', BLANK_VALUE),
        ('m{a="1"}   ', BLANK_VALUE),
    ],
)
def test_bad_lines_are_dropped_with_their_reason(line: str, reason: str) -> None:
    result = parse_exposition(f'ok{{a="1"}} 7\n{line}\nok{{a="2"}} 8\n')
    assert [s.value for s in result.samples] == [7.0, 8.0]
    assert result.dropped == {reason: 1}


def test_duplicate_series_keep_the_first() -> None:
    result = parse_exposition('m{a="1",b="2"} 1\nm{a="1",b="2"} 2\nm{a="1"} 3\n')
    assert [s.value for s in result.samples] == [1.0, 3.0]
    assert result.dropped == {DUPLICATE_SERIES: 1}


def test_truncated_body_keeps_every_complete_line() -> None:
    body = 'm{a="1"} 1\nm{a="2"} 2\nm{a="3'
    result = parse_exposition(body)
    assert [s.label("a") for s in result.samples] == ["1", "2"]
    assert result.dropped == {MALFORMED_LINE: 1}


def test_parse_labels_edges() -> None:
    assert parse_labels("") == ()
    assert parse_labels(' a = "1" , b="x\\"y",') == (("a", "1"), ("b", 'x"y'))
    assert parse_labels('a="1",,b="2"') is None
    assert parse_labels(",") is None
    assert parse_labels('a="unterminated') is None
    assert parse_labels('1a="x"') is None


def test_read_value() -> None:
    assert read_value(" 1.5") == (1.5, None)
    assert read_value(" 1.5 42") == (1.5, 42)
    assert read_value("") == BLANK_VALUE
    assert read_value(" x") == MALFORMED_VALUE
    assert read_value(" 1 2 3") == MALFORMED_LINE


@pytest.mark.shared_data
def test_every_real_dcgm_file_reads_without_drops(shared_data: Path) -> None:
    """Checks every ``../shared/data/dcgm/*.prom`` (the line counts are the files' own)."""
    expected = {
        "a100-40gb-mig-1g5gb-nvidia-docs.prom": 21,
        "grid-a100-10c-vgpu-vks.prom": 11,
        "h100-k8s-sampled.prom": 30,
        "l4-kops-aws-default-counters.prom": 23,
        "l40s-upcloud-default-counters.prom": 23,
    }
    for path in sorted((shared_data / "dcgm").glob("*.prom")):
        result = parse_exposition(path.read_text(encoding="utf-8"))
        assert len(result.samples) == expected[path.name], path.name
        assert not result.dropped, path.name


# -- properties -----------------------------------------------------------------------------

_names = st.from_regex(r"[a-zA-Z_:][a-zA-Z0-9_:]{0,20}", fullmatch=True)
_label_names = st.from_regex(r"[a-zA-Z_][a-zA-Z0-9_]{0,12}", fullmatch=True)
_label_values = st.text(
    st.characters(blacklist_categories=("Cs",)), max_size=20
)  # any text, quotes, backslashes and newlines included
_values = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(-(2**53), 2**53).map(float),
)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _render_value(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(value)


@st.composite
def _samples(draw: st.DrawFn) -> list[Sample]:
    drawn = draw(
        st.lists(
            st.tuples(
                _names,
                st.dictionaries(_label_names, _label_values, max_size=4),
                _values,
                st.one_of(st.none(), st.integers(-(2**62), 2**62)),
            ),
            max_size=12,
            unique_by=lambda s: (s[0], tuple(sorted(s[1].items()))),
        )
    )
    return [Sample(n, tuple(labels.items()), v, ts) for n, labels, v, ts in drawn]


def _render(samples: list[Sample]) -> str:
    lines = []
    for s in samples:
        labels = ",".join(f'{k}="{_escape(v)}"' for k, v in s.labels)
        ts = "" if s.timestamp_ms is None else f" {s.timestamp_ms}"
        lines.append(f"{s.name}{{{labels}}} {_render_value(s.value)}{ts}")
    return "\n".join(lines) + "\n"


def _same(a: Sample, b: Sample) -> bool:
    same_value = (math.isnan(a.value) and math.isnan(b.value)) or a.value == b.value
    return (a.name, a.labels, a.timestamp_ms) == (b.name, b.labels, b.timestamp_ms) and same_value


@settings(max_examples=300, deadline=None)
@given(_samples())
def test_round_trip_of_generated_samples(samples: list[Sample]) -> None:
    result = parse_exposition(_render(samples))
    assert not result.dropped
    assert len(result.samples) == len(samples)
    assert all(_same(a, b) for a, b in zip(result.samples, samples, strict=True))


@settings(max_examples=500, deadline=None)
@given(st.text())
def test_arbitrary_text_never_raises(text: str) -> None:
    result = parse_exposition(text)
    assert all(isinstance(s.value, float) for s in result.samples)
    assert all(n > 0 for n in result.dropped.values())


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(['m{a="1"} 1', "m 2", "# TYPE m gauge", "{", "}", '"', " ", "\\"])))
def test_arbitrary_line_soup_never_raises(parts: list[str]) -> None:
    parse_exposition("\n".join(parts))
    parse_exposition("".join(parts))
