"""The reports layer: one typed function per question, under every surface.

Each report (``smf``, ``latency``, ``fragmentation``, ...) is a :class:`~.spec.ReportSpec`:
settings as a pydantic model, the tables it reads, and a builder taking a store and one
:class:`~.window.Window` that returns a frozen :class:`~.result.Report` (Arrow tables with
column units, the window used, notes). The CLI, the Streamlit app and the service's API only
render reports; none of them holds SQL, loops over rows or defaults of its own.

Layering: surfaces -> reports -> control -> analytics -> store / collectors -> domain.
"""
