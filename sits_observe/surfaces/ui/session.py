"""Streamlit glue shared by every page: settings, the store of this run, errors, the sidebar.

With ``--service`` the fetched tables are cached (``st.cache_resource``) for
:data:`CACHE_TTL_S` seconds per (URL, window), so every page and every session reads the
same in-memory copy and the service is asked at most once per TTL; the sidebar's Refresh
button drops the copy. With ``--db`` the file is opened read-only for the run and closed.
A package error is shown as one red line on the page, never a traceback.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime

import streamlit as st

from sits_observe.errors import SitsError
from sits_observe.store import Store
from sits_observe.surfaces.ui.config import UiSettings, settings_from_process
from sits_observe.surfaces.ui.source import Snapshot, open_file, snapshot_from_service, window_since

#: Seconds a copy of the service's tables is reused.
CACHE_TTL_S = 30.0

Render = Callable[[Store, UiSettings], None]


@st.cache_resource(ttl=CACHE_TTL_S, show_spinner="fetching tables from the service ...")
def _snapshot(url: str, token: str, window_s: float) -> Snapshot:
    now = datetime.now(UTC)
    return snapshot_from_service(
        url, token, since=window_since(window_s, now), now=now.replace(tzinfo=None)
    )


@contextmanager
def open_store(settings: UiSettings) -> Iterator[Store]:
    """The store this page run reads (see the module docstring)."""
    if settings.db is not None:
        with open_file(str(settings.db)) as store:
            yield store
        return
    assert settings.service is not None and settings.token is not None
    snap = _snapshot(settings.service, settings.token.get_secret_value(), settings.window_s)
    st.sidebar.caption(
        f"{sum(snap.rows.values()):,} rows fetched at {snap.fetched_at:%H:%M:%S} UTC "
        f"(cached {CACHE_TTL_S:g} s)"
    )
    yield snap.store


def sidebar(settings: UiSettings) -> None:
    """Where the data comes from, and a button that refetches it."""
    st.sidebar.caption(f"data: {settings.source_key}")
    if st.sidebar.button("Refresh data", key="refresh"):
        _snapshot.clear()


def run_page(render: Render) -> None:
    """Load the settings, open the store and call ``render``; errors become one line."""
    try:
        settings = settings_from_process()
    except SitsError as exc:
        st.error(f"configuration: {exc}")
        st.stop()
        return
    sidebar(settings)
    try:
        with open_store(settings) as store:
            render(store, settings)
    except SitsError as exc:
        st.error(str(exc))


def guarded(what: str, fn: Callable[[], None]) -> None:
    """Run one section of a page; a package error there is shown and the page goes on."""
    try:
        fn()
    except SitsError as exc:
        st.warning(f"{what}: {exc}")
