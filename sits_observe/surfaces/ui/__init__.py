"""The Streamlit app's package: data access and glue for ``dashboards/`` (see docs/ui.md).

Analytics are called, never re-implemented: :mod:`.analyses` and :mod:`.whatif` compose the
analytics functions as the CLI commands do; :mod:`.data` reads the fleet tables and decision
log; :mod:`.source` opens a file or copies the service's tables; ``page_*`` draw the pages.
"""
