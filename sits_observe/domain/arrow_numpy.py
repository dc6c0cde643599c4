"""Arrow number columns as NumPy arrays, read from their buffers.

pyarrow's own conversions (``to_numpy``, ``np.asarray`` of a column, ``pa.array`` of NumPy or
Python values, ``pa.scalar``) import pandas on their first call when it is installed (Arrow's
C++ side initialises its pandas support then): about 0.15 s. The scheduler extender's first
answer after ``serve`` starts waits for its first view build (docs/extender.md, cold start),
so the view reads its number columns here instead. A fixed-width Arrow array is a values
buffer, already laid out as NumPy lays out the same numbers, and a validity bitmap (bit i set
= value i is present, least significant bit first; Arrow columnar format, "Validity
bitmaps"); a sliced array starts ``offset`` values into both. A column without NULLs comes back
as a read-only view of its Arrow buffer, as pyarrow's ``to_numpy`` gives it.
"""

from __future__ import annotations

from typing import TypeVar

import numpy as np
import numpy.typing as npt
import pyarrow as pa

Number = TypeVar("Number", np.float64, np.int64)


def float64_values(column: pa.Array | pa.ChunkedArray) -> npt.NDArray[np.float64]:
    """``column`` cast to float64, NULL as NaN (as ``to_numpy(zero_copy_only=False)``)."""
    return _values(column, pa.float64(), np.dtype(np.float64), np.nan)


def int64_values(column: pa.Array | pa.ChunkedArray, *, null: int) -> npt.NDArray[np.int64]:
    """``column`` cast to int64 (a cast that loses information raises pyarrow's
    ``ArrowInvalid``), NULL as ``null``."""
    return _values(column, pa.int64(), np.dtype(np.int64), null)


def _values(
    column: pa.Array | pa.ChunkedArray,
    arrow_type: pa.DataType,
    dtype: np.dtype[Number],
    null: float,
) -> npt.NDArray[Number]:
    size = len(column)
    if size == 0:  # before the cast: casting a column of no chunks imports pandas
        return np.empty(0, dtype)
    array = column.cast(arrow_type)
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    validity, data = array.buffers()
    values = np.frombuffer(data, dtype, count=size, offset=array.offset * dtype.itemsize)
    if validity is None or array.null_count == 0:
        return values
    bits = np.unpackbits(np.frombuffer(validity, np.uint8), bitorder="little")
    present = bits[array.offset : array.offset + size].astype(np.bool_)
    return np.where(present, values, null).astype(dtype, copy=False)
