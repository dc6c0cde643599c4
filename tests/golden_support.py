"""Golden files: a rendered table compared with tests/golden/<name>.txt.

``UPDATE_GOLDEN=1 pytest ...`` rewrites the files (then review the diff before committing);
otherwise a difference fails with both texts shown.
"""

from __future__ import annotations

import os
from pathlib import Path

GOLDEN = Path(__file__).parent / "golden"


def assert_golden(name: str, text: str) -> None:
    """``text`` equals the golden file ``name`` (written instead when UPDATE_GOLDEN=1)."""
    path = GOLDEN / f"{name}.txt"
    update = os.environ.get("UPDATE_GOLDEN") == "1"
    if update or not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        if not update:
            raise AssertionError(f"golden file {path} did not exist: written, review and rerun")
        return
    expected = path.read_text(encoding="utf-8")
    assert text == expected, (
        f"{name} differs from {path}:\n--- got\n{text}\n--- expected\n{expected}"
    )
