"""The fleet page (drawn by sits_observe.surfaces.ui.page_fleet)."""

from sits_observe.surfaces.ui.page_fleet import render
from sits_observe.surfaces.ui.session import run_page

run_page(render)
