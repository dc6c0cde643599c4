"""The embedded DuckDB store."""

from sits_observe.domain.times import utc_naive
from sits_observe.store.duck import BatchReceipt, Store
from sits_observe.store.group_commit import GroupCommitSettings, GroupCommitter
from sits_observe.store.retention import RetentionReport, RetentionSettings, enforce_retention

__all__ = [
    "BatchReceipt",
    "GroupCommitSettings",
    "GroupCommitter",
    "RetentionReport",
    "RetentionSettings",
    "Store",
    "enforce_retention",
    "utc_naive",
]
