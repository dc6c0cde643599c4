"""The extender's cluster view: the store's latest state as per-node arrays, where it is read
from (DuckDB or PromQL), its slow signals, and the cache that rebuilds it off the request path."""
