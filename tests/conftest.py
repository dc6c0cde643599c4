"""Fixtures shared by every test: the location of the real reference data."""

from __future__ import annotations

from pathlib import Path

import pytest

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


@pytest.fixture
def shared_data() -> Path:
    """``../shared/data`` beside the checkout; skips the test when it is absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"reference data not found at {SHARED_DATA} (read-only, outside the repo)")
    return SHARED_DATA
