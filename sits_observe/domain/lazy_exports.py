"""Re-exports that load on first use: a package's module ``__getattr__`` (PEP 562).

A package whose ``__init__`` re-exports its modules' names makes importing any one of its
modules import all of them. Where that matters for start-up (``serve`` reads a few settings
modules for its flags, and the scheduler extender's first answer after a restart waits for
whatever the process imports before its port is up: docs/extender.md, cold start), the
``__init__`` lists where each name lives and hands this function's result to Python::

    __getattr__ = lazy_exports(__name__, {"create_app": "app"})

with the same names imported under ``if TYPE_CHECKING:`` for type checkers. Attribute access
then imports the one module that defines the name, once (Python keeps the module in
``sys.modules``); ``from package import name`` works unchanged.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping


def lazy_exports(package: str, where: Mapping[str, str]) -> Callable[[str], object]:
    """The module ``__getattr__`` of ``package``: name -> ``package.<where[name]>.<name>``;
    an unlisted name raises :class:`AttributeError`, as a missing attribute does."""

    def attribute(name: str) -> object:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(f"{package}.{module}"), name)

    return attribute
