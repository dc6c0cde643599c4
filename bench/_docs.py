"""Where the benchmarks record their figures: a block between two markers in a doc."""

from __future__ import annotations

from pathlib import Path


def write_block(path: Path, begin: str, end: str, text: str, heading: str) -> None:
    """Put ``text`` between ``begin`` and ``end`` in ``path``: the block there is replaced,
    or, the first time, appended under ``heading``."""
    doc = path.read_text(encoding="utf-8")
    block = f"{begin}\n{text}\n{end}"
    if begin in doc and end in doc:
        head, rest = doc.split(begin, 1)
        doc = head + block + rest.split(end, 1)[1]
    else:
        doc = doc.rstrip("\n") + f"\n\n{heading}\n\n{block}\n"
    path.write_text(doc, encoding="utf-8")
