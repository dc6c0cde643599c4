"""The embedded DuckDB store."""

from sits_observe.domain.times import utc_naive
from sits_observe.store.duck import BatchReceipt, Store
from sits_observe.store.group_commit import GroupCommitSettings, GroupCommitter
from sits_observe.store.intake import Batch, IngestReceipt, Prepared, prepare
from sits_observe.store.retention import RetentionReport, RetentionSettings, enforce_retention

__all__ = [
    "Batch",
    "BatchReceipt",
    "GroupCommitSettings",
    "GroupCommitter",
    "IngestReceipt",
    "Prepared",
    "RetentionReport",
    "RetentionSettings",
    "Store",
    "enforce_retention",
    "prepare",
    "utc_naive",
]
