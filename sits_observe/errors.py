"""The one exception tree of sits_observe.

Every error the package raises on purpose derives from :class:`SitsError`. Third-party
errors are wrapped with ``raise ... from`` so callers catch one family. Messages say what
failed, the bad value, and what is allowed or what to do next.
"""


class SitsError(Exception):
    """Root of every error sits_observe raises on purpose."""


class ConfigError(SitsError):
    """A setting, flag or configuration file value is invalid."""


class UnknownNameError(ConfigError):
    """A name the user gave (a report, model, node, table or column) does not exist."""


class NoDataError(SitsError):
    """The data an answer needs is not there: an empty table, a window with no rows, too
    little history."""


class ParseError(SitsError):
    """Input in a vendor format (exposition text, cgroup file, log row) could not be read."""


class InputTooLarge(ParseError):
    """Input that would cost more than a configured limit once decoded; ``limit`` names it
    (a flag or setting), ``value`` is what the input declares and ``allowed`` the limit."""

    def __init__(self, message: str, *, limit: str, value: int, allowed: int) -> None:
        super().__init__(message)
        self.limit = limit
        self.value = value
        self.allowed = allowed


class CollectorError(SitsError):
    """A collector could not reach or read its source (dead endpoint, missing driver)."""


class DriverUnavailable(CollectorError):
    """No NVIDIA driver / NVML library is present on this machine."""


class StoreError(SitsError):
    """The DuckDB store could not be opened, migrated, written or read."""


class StoreLocked(StoreError):
    """Another process owns the database file."""


class SchemaError(StoreError):
    """Data handed to the store does not match the table's schema."""


class BatchConflict(StoreError):
    """A batch id already stored arrived again with a different body (not a replay)."""


class TransportError(SitsError):
    """Shipping a batch from an agent to the service failed."""


class ControllerError(SitsError):
    """The controller could not read the cluster state or write a change."""


class KubeApiError(ControllerError):
    """The Kubernetes API answered an error (``status`` 0: it could not be reached)."""

    def __init__(self, message: str, *, status: int, retry_after_s: float | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.retry_after_s = retry_after_s
