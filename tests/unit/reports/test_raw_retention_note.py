"""A window longer than raw retention says so: reports read raw samples, not the one-minute
roll-ups retention folds older ones into, so a 7-day window over a store that keeps 6 h of raw
rows answers from 6 h (measured by bench/bench_week.py) and must not do it silently."""

from __future__ import annotations

from datetime import datetime, timedelta

import pyarrow as pa

from sits_observe.reports import baseline
from sits_observe.reports.spec import run_report
from sits_observe.reports.window import WindowRequest
from sits_observe.store import Store
from sits_observe.store.retention import RetentionSettings, enforce_retention

T0 = datetime(2026, 11, 1, 0, 0)


def test_a_window_past_the_raw_rows_gets_a_note_naming_where_it_answers_from() -> None:
    with Store.open(":memory:") as store:
        n = 10 * 60  # ten hours, one sample a minute
        store.append(
            "gpu_samples",
            pa.table(
                {
                    "ts": [T0 + timedelta(minutes=i) for i in range(n)],
                    "node": ["n1"] * n,
                    "gpu_uuid": ["GPU-a"] * n,
                    "gpu_util_ratio": [0.5] * n,
                }
            ),
        )
        end = T0 + timedelta(minutes=n)
        enforce_retention(store, end, RetentionSettings(raw_retention_s=3600))
        spec = baseline.SPEC
        settings = spec.validate({"metric": "gpu_util_ratio"})

        def notes(since: str) -> list[str]:
            request = WindowRequest.parse(since, end.isoformat())
            return list(run_report(spec, store, request, settings).notes)

        long = [n for n in notes("9h") if "keeps raw rows only from" in n]
        assert len(long) == 1 and "2026-11-01 09:00:00" in long[0]  # the oldest raw row
        assert not [n for n in notes("30m") if "keeps raw rows" in n]
