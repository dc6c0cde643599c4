"""One-line messages for files Polars refuses to read.

Polars' errors span many lines (the error, blank lines, then paragraphs of hints such as
"Consider setting 'truncate_ragged_lines=True'" that name Polars options a user cannot pass),
and a CSV with a line that has more fields than its header is reported without the line
number. The request-log importer turns them into one line that names the file, the line and
what to do. These helpers run only after a read has failed, so they cost nothing on good input.
"""

from __future__ import annotations

import csv
from pathlib import Path


def first_line(exc: BaseException) -> str:
    """The first non-blank line of an error's text."""
    return next((line.strip() for line in str(exc).splitlines() if line.strip()), repr(exc))


def ragged_csv_line(path: Path) -> str | None:
    """What is wrong with the first CSV record that has more fields than the header (line
    numbers as a text editor shows them, quoted newlines included), else None."""
    try:
        with path.open(newline="", encoding="utf-8", errors="replace") as handle:
            reader = csv.reader(handle)
            header = next(reader, [])
            for record in reader:
                if len(record) > len(header):
                    return (
                        f"line {reader.line_num} has {len(record)} fields but the header has "
                        f"{len(header)}; remove the extra fields or quote the values that "
                        "contain commas, then import again"
                    )
    except (OSError, csv.Error):
        return None
    return None
