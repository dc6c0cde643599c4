"""Recommendations page: the controller's planned actions and its decision log."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import streamlit as st

from sits_observe.store import Store
from sits_observe.surfaces.ui.config import UiSettings
from sits_observe.surfaces.ui.data import decision_counts, decision_log, planned_actions
from sits_observe.surfaces.ui.session import guarded

_OUTCOMES = ["recommended", "applied", "skipped", "failed"]


def render(store: Store, settings: UiSettings) -> None:
    """Draw the recommendations / decision log page from ``store``."""
    st.title("Recommendations and decisions")
    guarded("planned actions", lambda: _planned(store))
    since = datetime.now(UTC) - timedelta(seconds=settings.window_s)
    newest = store.scalar("SELECT max(ts) FROM decisions")
    if isinstance(newest, datetime):
        # A stored database: count back from its newest decision, not from the wall clock.
        since = min(since.replace(tzinfo=None), newest - timedelta(seconds=settings.window_s))
    st.header("Decision log")
    counts = decision_counts(store, since=since)
    if counts.num_rows == 0:
        st.info("no decisions recorded in the window: is the controller running?")
        return
    st.dataframe(counts, hide_index=True)
    actions = sorted(set(counts.column("action").to_pylist()) - {None})
    chosen_actions = st.multiselect("actions", actions, key="actions")
    chosen_outcomes = st.multiselect("outcomes", _OUTCOMES, key="outcomes")
    log = decision_log(store, since=since, actions=chosen_actions, outcomes=chosen_outcomes)
    st.caption(f"{log.num_rows} decisions, newest first")
    st.dataframe(log, hide_index=True)


def _planned(store: Store) -> None:
    st.header("Planned actions")
    st.caption("what the controller would recommend now, from the stored signals")
    rows = planned_actions(store, now=datetime.now(UTC))
    if not rows:
        st.success("no recommendations")
        return
    st.dataframe(rows, hide_index=True)
