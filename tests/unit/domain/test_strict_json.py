"""Strict JSON: a non-finite float becomes null, whichever path encodes the document."""

from __future__ import annotations

import json
import math
from types import MappingProxyType

import pytest

from sits_observe.domain.strict_json import dumps, finite_or_none


def strict_loads(text: str) -> object:
    """Parse as Go's encoding/json would: NaN and Infinity are errors."""

    def refuse(token: str) -> object:
        raise ValueError(f"not RFC 8259: {token}")

    return json.loads(text, parse_constant=refuse)


def test_a_finite_document_is_what_json_writes() -> None:
    doc = {"Nodes": ["a", "b"], "score": [{"Host": "a", "Score": 7}], "x": 0.25, "t": (1, 2)}
    assert dumps(doc) == json.dumps(doc)
    assert dumps(doc, separators=(",", ":")) == json.dumps(doc, separators=(",", ":"))


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_non_finite_floats_deep_inside_become_null(bad: float) -> None:
    doc = {"rows": [{"a": 1.5, "b": bad}, (bad, 2)], "top": bad}
    assert strict_loads(dumps(doc)) == {"rows": [{"a": 1.5, "b": None}, [None, 2]], "top": None}


def test_a_mapping_that_is_not_a_dict_is_written_as_an_object() -> None:
    doc = {"inner": MappingProxyType({"k": 1.0, "bad": math.nan})}
    assert strict_loads(dumps(doc)) == {"inner": {"k": 1.0, "bad": None}}


def test_what_json_cannot_write_still_fails_clearly() -> None:
    with pytest.raises(TypeError, match="not JSON serializable"):
        dumps({"when": object()})


def test_finite_or_none_keeps_everything_else() -> None:
    assert finite_or_none([1, "x", None, True, 2.0]) == [1, "x", None, True, 2.0]
