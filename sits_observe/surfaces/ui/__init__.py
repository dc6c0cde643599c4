"""The Streamlit app's package: pages that render reports, for ``dashboards/`` (docs/ui.md).

Every number on a page comes from a report (:mod:`sits_observe.reports`), read from a file or
through the service by :mod:`.reading`; :mod:`.tables` and :mod:`.charts` render reports'
tables with the CLI's headers and human units; ``page_*`` draw the pages. Nothing here
computes, queries a table or imports the CLI.
"""
