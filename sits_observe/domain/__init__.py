"""Plain value types shared by every layer: table schemas, samples, collector results."""

from sits_observe.domain.collect import Collector, CollectResult, DropCounter
from sits_observe.domain.schema.table_spec import TableSpec
from sits_observe.domain.tables import TABLES, empty_table, find_table, table_names

__all__ = [
    "TABLES",
    "CollectResult",
    "Collector",
    "DropCounter",
    "TableSpec",
    "empty_table",
    "find_table",
    "table_names",
]
