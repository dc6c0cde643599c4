"""The layer contract, checked at run time: importing a lower layer loads no upper layer
and no forbidden third-party package (import-linter checks the static graph in make test)."""

from __future__ import annotations

import subprocess
import sys

import pytest

CASES = {
    "sits_observe.domain": ["sits_observe.store", "sits_observe.collectors", "fastapi"],
    "sits_observe.store": ["sits_observe.collectors", "sits_observe.surfaces", "kubernetes"],
    "sits_observe.collectors.exposition": ["sits_observe.store", "duckdb"],
    "sits_observe.lab.cluster.cluster": ["sits_observe.collectors", "sits_observe.store"],
}


@pytest.mark.parametrize("module", sorted(CASES))
def test_lower_layer_does_not_load_upper_layers(module: str) -> None:
    code = (
        f"import sys, {module}\n"
        f"bad = [m for m in {CASES[module]!r} if m in sys.modules]\n"
        "print(','.join(bad))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True, timeout=120
    )
    assert result.stdout.strip() == "", f"{module} loaded {result.stdout.strip()}"
