"""Arrow number columns read from their buffers equal pyarrow's own NumPy conversion."""

from __future__ import annotations

import itertools
import subprocess
import sys
from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sits_observe.domain.arrow_numpy import float64_values, int64_values

INT64 = st.integers(-(2**63), 2**63 - 1)
#: Chunk boundaries and a slice of the whole: chunked and offset arrays, as DuckDB and
#: ``Table.slice`` hand them over.
CUTS = st.lists(st.integers(0, 40), max_size=4)


def chunked(values: Sequence[object], kind: pa.DataType, cuts: list[int]) -> pa.ChunkedArray:
    bounds = sorted({0, len(values), *(c for c in cuts if c < len(values))})
    pieces = [pa.array(values[a:b], kind) for a, b in itertools.pairwise(bounds)]
    return pa.chunked_array(pieces, kind)


@settings(deadline=None)  # the first example's to_numpy imports pandas
@given(
    st.lists(st.none() | st.floats(allow_nan=True, allow_infinity=True), max_size=60),
    CUTS,
    st.integers(0, 10),
)
def test_floats_equal_pyarrows_conversion(
    values: list[float | None], cuts: list[int], start: int
) -> None:
    column = chunked(values, pa.float64(), cuts)[start:]
    expected = column.to_numpy(zero_copy_only=False)
    got = float64_values(column)
    assert got.dtype == np.float64
    np.testing.assert_array_equal(got, expected)  # NaN equals NaN here


@given(st.lists(st.none() | INT64, max_size=60), CUTS, st.integers(0, 10), INT64)
def test_ints_equal_the_values_with_null_filled(
    values: list[int | None], cuts: list[int], start: int, null: int
) -> None:
    column = chunked(values, pa.int64(), cuts)[start:]
    got = int64_values(column, null=null)
    assert got.dtype == np.int64
    assert got.tolist() == [null if v is None else v for v in values[start:]]


@given(st.lists(st.none() | st.integers(-(2**31), 2**31 - 1), max_size=40), CUTS)
def test_other_widths_are_cast(values: list[int | None], cuts: list[int]) -> None:
    column = chunked(values, pa.int32(), cuts)
    np.testing.assert_array_equal(
        float64_values(column), [np.nan if v is None else float(v) for v in values]
    )
    assert int64_values(column, null=-1).tolist() == [-1 if v is None else v for v in values]


def test_a_lossy_cast_is_refused() -> None:
    with pytest.raises(pa.ArrowInvalid):
        int64_values(pa.chunked_array([pa.array([1.5])]), null=0)


def test_empty_columns() -> None:
    for column in (pa.chunked_array([], pa.float64()), pa.array([], pa.int64())):
        assert float64_values(column).shape == (0,)
        assert int64_values(column, null=0).dtype == np.int64


def test_reading_a_column_does_not_import_pandas() -> None:
    """The point of the module: pyarrow's ``to_numpy`` here would import pandas."""
    code = (
        "import sys, duckdb\n"
        "from sits_observe.domain.arrow_numpy import float64_values, int64_values\n"
        "t = duckdb.sql('SELECT i AS r, CASE WHEN i % 3 = 0 THEN NULL ELSE i / 2 END AS f "
        "FROM range(10) t(i)').to_arrow_table()\n"
        "print(float64_values(t.column('f')).tolist(), int64_values(t.column('r'), null=0).sum(), "
        "'pandas' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout.split()[-2:] == ["45", "False"], done.stdout
