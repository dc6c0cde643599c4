"""The whatif page (drawn by sits_observe.surfaces.ui.page_whatif)."""

from sits_observe.surfaces.ui.page_whatif import render
from sits_observe.surfaces.ui.session import run_page

run_page(render)
