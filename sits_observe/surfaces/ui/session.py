"""Streamlit glue shared by every page: settings, the reader of this run, the sidebar, errors.

The sidebar names the data source and holds the window (``since`` / ``until``, the CLI's
words, starting from ``--since`` / ``--until``) and the *every column* switch (the CLI's
``-o wide``). With ``--service`` each report read is cached (``st.cache_resource``) for
:data:`CACHE_TTL_S` seconds per (report, window, settings), so every page and session asks
the service at most once per TTL; the sidebar's Refresh button drops the cache. With
``--db`` the file is opened read-only for the run and closed. A package error is one red line
on the page, never a traceback.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import streamlit as st

from sits_observe.errors import SitsError
from sits_observe.reports.remote import fetch_report
from sits_observe.reports.result import Report
from sits_observe.reports.window import WindowRequest
from sits_observe.surfaces.ui.config import UiSettings, settings_from_process, window_request
from sits_observe.surfaces.ui.reading import Reader, open_reader

#: Seconds a report read through the service is reused.
CACHE_TTL_S = 30.0

Render = Callable[[Reader, UiSettings], None]


def _frozen(value: Any) -> Any:
    return tuple(value) if isinstance(value, list | tuple) else value


@st.cache_resource(ttl=CACHE_TTL_S, show_spinner="reading the report from the service ...")
def _cached(
    url: str,
    token: str,
    name: str,
    window: tuple[tuple[str, str], ...],
    values: tuple[tuple[str, Any], ...],
) -> Report:
    query = dict(window)
    request = WindowRequest.parse(query.get("since"), query.get("until"))
    return fetch_report(url, token, name, request, dict(values))


def cached_fetch(
    url: str, token: str, name: str, request: WindowRequest, values: Mapping[str, Any]
) -> Report:
    """:func:`~sits_observe.reports.remote.fetch_report`, cached (see the module docstring)."""
    window = tuple(sorted(request.query().items()))
    items = tuple(sorted((k, _frozen(v)) for k, v in values.items() if v is not None))
    return _cached(url, token, name, window, items)


def sidebar(settings: UiSettings) -> WindowRequest:
    """The source, the window inputs and the refresh button; the window asked for."""
    st.sidebar.caption(f"data: {settings.source_key}")
    since = st.sidebar.text_input(
        "since", settings.since, key="since", help=UiSettings.model_fields["since"].description
    )
    until = st.sidebar.text_input(
        "until", settings.until, key="until", help=UiSettings.model_fields["until"].description
    )
    st.sidebar.toggle("every column", key="wide", help="the columns of `-o wide`: UUIDs, ids, …")
    if st.sidebar.button("Refresh data", key="refresh"):
        _cached.clear()
    try:
        return window_request(since, until)
    except SitsError as exc:
        st.sidebar.error(str(exc))
        return settings.window()


def wide() -> bool:
    """Whether the sidebar asks for every column."""
    return bool(st.session_state.get("wide", False))


def run_page(render: Render) -> None:
    """Load the settings, open the reader and call ``render``; errors become one line."""
    try:
        settings = settings_from_process()
    except SitsError as exc:
        st.error(f"configuration: {exc}")
        st.stop()
        return
    request = sidebar(settings)
    try:
        with open_reader(settings, request, cached_fetch) as reader:
            render(reader, settings)
    except SitsError as exc:
        st.error(str(exc))


def guarded(what: str, fn: Callable[[], None]) -> None:
    """Run one section of a page; a package error there is shown and the page goes on."""
    try:
        fn()
    except SitsError as exc:
        st.warning(f"{what}: {exc}")
