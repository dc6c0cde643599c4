"""The fragmentation page (drawn by sits_observe.surfaces.ui.page_fragmentation)."""

from sits_observe.surfaces.ui.page_fragmentation import render
from sits_observe.surfaces.ui.session import run_page

run_page(render)
