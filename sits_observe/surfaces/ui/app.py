"""The Streamlit app's entry point: page navigation (``dashboards/app.py`` calls :func:`main`).

Pages are files under ``dashboards/views/`` (so ``streamlit.testing`` can switch to each);
each one calls :func:`~sits_observe.surfaces.ui.session.run_page` with its ``render``.
"""

from __future__ import annotations

import streamlit as st

#: (file under dashboards/, title, icon), in menu order; the first is the default page.
PAGES: tuple[tuple[str, str, str], ...] = (
    ("views/fleet.py", "Fleet", ":material/dns:"),
    ("views/heatmap.py", "Latency heatmap", ":material/grid_on:"),
    ("views/fragmentation.py", "Fragmentation", ":material/grain:"),
    ("views/whatif.py", "What-if", ":material/science:"),
    ("views/decisions.py", "Recommendations", ":material/fact_check:"),
)


def main() -> None:
    """Set up the page and run the selected one."""
    st.set_page_config(page_title="sits_observe", layout="wide")
    pages = [
        st.Page(path, title=title, icon=icon, default=i == 0)
        for i, (path, title, icon) in enumerate(PAGES)
    ]
    st.navigation(pages).run()
