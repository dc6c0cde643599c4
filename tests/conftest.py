"""Fixtures shared by every test: the location of the real reference data; and Hypothesis
without its per-example deadline."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import settings

# Speed is measured in bench/, not asserted in tests: Hypothesis's default 200 ms deadline
# per example is a timing assertion, and on a loaded 2-core machine an example that writes a
# file now and then takes longer (a request-log round trip took 296 ms once, 19 ms when
# rerun) and fails the run as "flaky". Each test's own @settings still wins.
settings.register_profile("sits", deadline=None)
settings.load_profile("sits")

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


@pytest.fixture
def shared_data() -> Path:
    """``../shared/data`` beside the checkout; skips the test when it is absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"reference data not found at {SHARED_DATA} (read-only, outside the repo)")
    return SHARED_DATA
