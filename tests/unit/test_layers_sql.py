"""Surfaces hold no SQL (issue 11): the CLI, the Streamlit app, the service's API, the exporter
and the alert evaluator only render what the reports layer or a lower layer returns.

Every module under ``sits_observe/surfaces`` is parsed with :mod:`ast`; the test fails, naming
``file:line``, on a string literal (f-strings included) that reads as SQL, or on a query call
(``.query(``, ``.scalar(``, ``.execute(``, ``.cursor(``, ``.sql(``) made on a store object
(an expression whose text names a store: ``store``, ``self._store``, ``Store.open(...)``).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

import sits_observe

SURFACES = Path(sits_observe.__file__).parent / "surfaces"
ROOT = SURFACES.parent.parent

#: SQL keywords are upper case in this code base; prose ("select the rows from ...") is not.
SQL = re.compile(r"\b(SELECT|INSERT|UPDATE|DELETE)\b.*\b(FROM|INTO|SET)\b", re.DOTALL)
#: Methods that run SQL on a store (sits_observe.store.Store) or a DuckDB connection.
QUERY_METHODS = frozenset({"query", "scalar", "execute", "cursor", "sql"})
#: What a store object is called: ``store``, ``self.store``, ``p.store``, ``self._store``,
#: ``Store.open(path)`` ...
STORE_NAME = re.compile(r"store", re.IGNORECASE)


def _text(node: ast.expr) -> str | None:
    """The literal text of a string constant or an f-string (its constant parts)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return " ".join(
            v.value for v in node.values if isinstance(v, ast.Constant) and isinstance(v.value, str)
        )
    return None


def offences(source: str, filename: str) -> Iterator[str]:
    """``file:line: why`` for every SQL literal and store query call in ``source``."""
    tree = ast.parse(source, filename)
    inside_fstring = {
        id(v) for node in ast.walk(tree) if isinstance(node, ast.JoinedStr) for v in node.values
    }
    for node in ast.walk(tree):
        if isinstance(node, ast.expr) and id(node) not in inside_fstring:
            text = _text(node)
            if text is not None and SQL.search(text):
                first = " ".join(text.split())[:60]
                yield f"{filename}:{node.lineno}: SQL literal {first!r}"
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in QUERY_METHODS
        ):
            receiver = ast.unparse(node.func.value)
            if STORE_NAME.search(receiver):
                yield f"{filename}:{node.lineno}: {receiver}.{node.func.attr}(...) on a store"


def surface_offences() -> list[str]:
    """Every offence in every module under ``sits_observe/surfaces``."""
    found: list[str] = []
    for path in sorted(SURFACES.rglob("*.py")):
        name = str(path.relative_to(ROOT))
        lines = offences(path.read_text(encoding="utf-8"), name)
        found.extend(sorted(lines, key=lambda line: int(line.split(":")[1])))
    return found


def test_surfaces_hold_no_sql() -> None:
    found = surface_offences()
    assert not found, (
        "surfaces hold no SQL: move these reads into sits_observe/reports (or the analytics / "
        "store layer) and render what they return:\n" + "\n".join(found)
    )


@pytest.mark.parametrize(
    ("source", "why"),
    [
        ('store.query("SELECT 1 FROM x")', "SQL literal"),
        ("self.store.scalar(sql)", "self.store.scalar(...) on a store"),
        ("p.store.query(q, [1])", "p.store.query(...) on a store"),
        ('self._store.execute("x")', "self._store.execute(...) on a store"),
        ("store.cursor().sql(q)", "store.cursor(...) on a store"),
        ('Store.open("f").query(q)', "Store.open('f').query(...)"),
        ('q = f"SELECT a FROM {t} WHERE b"', "SQL literal"),
        ('q = """\nSELECT a,\n  b\nFROM t\n"""', "SQL literal"),
        ('q = "INSERT INTO t VALUES (?)"', "SQL literal"),
        ('q = "UPDATE t SET a = 1"', "SQL literal"),
        ('q = "DELETE FROM t"', "SQL literal"),
    ],
)
def test_the_check_finds_sql(source: str, why: str) -> None:
    found = list(offences(source, "m.py"))
    assert any(why in f for f in found), found


@pytest.mark.parametrize(
    "source",
    [
        "request.query()",  # Starlette's query parameters
        'x = "select the rows from the window"',  # prose
        'x = "SELECT"',  # a keyword alone (a UI label)
        "store.count('gpu_samples')",
        "report = build(store, window)",
    ],
)
def test_the_check_lets_rendering_pass(source: str) -> None:
    assert list(offences(source, "m.py")) == []
