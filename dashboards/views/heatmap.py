"""The heatmap page (drawn by sits_observe.surfaces.ui.page_heatmap)."""

from sits_observe.surfaces.ui.page_heatmap import render
from sits_observe.surfaces.ui.session import run_page

run_page(render)
