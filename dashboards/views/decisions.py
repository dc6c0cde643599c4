"""The decisions page (drawn by sits_observe.surfaces.ui.page_decisions)."""

from sits_observe.surfaces.ui.page_decisions import render
from sits_observe.surfaces.ui.session import run_page

run_page(render)
