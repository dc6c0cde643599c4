"""The demo's work folder across runs: one run at a time, and a rerun starts clean.

A demo run leaves behind its simulated node files (``cluster/``: cgroup trees, request logs),
the agents' spools (``spool/``), the Streamlit token and log, and its DuckDB file. The
simulated cluster always restarts from its seed, so the node files of an earlier run (after
Ctrl-C, after ``--duration``, after a crash) are never reused: they are replaced. The
database is replaced too by default, so every run's figures describe that run; with
``keep_db`` the new run appends to it instead (and the old spools are kept, so batches an
earlier run had not delivered still arrive, into the same database).

Safety: the demo deletes only what it made. It writes a marker file (:data:`MARKER`) into the
work folder naming the database it filled; a folder that holds a ``cluster/`` or ``spool/``
without the marker, or a database the marker does not name, is refused rather than removed.
A lock (``flock`` on the marker) keeps a second demo from replacing the files of one that is
still running; the kernel drops it when the process exits, however it exits.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from sits_observe.errors import ConfigError

#: Written into the work folder by every demo run.
MARKER = ".sits-demo.json"
#: What a run creates in its work folder (replaced on the next run).
RUN_DIRS = ("cluster", "spool")
RUN_FILES = ("read-token", "ui.log", "ui-token")  # ui-token: an earlier version's


@dataclass
class PreviousRun:
    """What became of an earlier run's files; :meth:`lines` says it in words."""

    removed: list[str] = field(default_factory=list)
    db_replaced: Path | None = None
    db_kept: Path | None = None
    spools_kept: bool = False

    def lines(self) -> list[str]:
        """One line per thing done, for stderr (empty on a first run)."""
        lines = []
        if self.removed:
            lines.append(f"previous run's node files replaced: {', '.join(self.removed)}")
        if self.db_replaced is not None:
            lines.append(
                f"previous run's database {self.db_replaced} replaced "
                "(--keep-db appends to it instead)"
            )
        if self.db_kept is not None:
            lines.append(f"appending to the existing database {self.db_kept} (--keep-db)")
        if self.spools_kept:
            lines.append("undelivered batches in the previous run's spools will be replayed")
        return lines


class WorkdirLock:
    """Holds the work folder for one demo run; :meth:`release` (or process exit) frees it."""

    def __init__(self, handle: IO[str]) -> None:
        self._handle = handle

    def release(self) -> None:
        """Unlock and close the marker."""
        if not self._handle.closed:
            fcntl.flock(self._handle, fcntl.LOCK_UN)
            self._handle.close()


def prepare_workdir(
    workdir: Path, db_path: Path, *, keep_db: bool
) -> tuple[WorkdirLock, PreviousRun]:
    """Lock ``workdir`` for a new run and clear what an earlier run left.

    Raises :class:`ConfigError` when another demo holds the folder, or when what is there was
    not made by a demo (nothing is deleted then).
    """
    workdir.mkdir(parents=True, exist_ok=True)
    marker_path = workdir / MARKER
    had_marker = marker_path.exists()
    handle = marker_path.open("a+", encoding="utf-8")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        raise ConfigError(
            f"another sits-observe demo is running in {workdir}; stop it first, "
            "or give this one another --workdir"
        ) from None
    try:
        previous = _clear(workdir, db_path, handle, had_marker=had_marker, keep_db=keep_db)
        handle.seek(0)
        handle.truncate()
        handle.write(json.dumps({"db": str(db_path.resolve()), "pid": os.getpid()}) + "\n")
        handle.flush()
    except BaseException:
        fcntl.flock(handle, fcntl.LOCK_UN)
        handle.close()
        raise
    return WorkdirLock(handle), previous


def _clear(
    workdir: Path, db_path: Path, marker: IO[str], *, had_marker: bool, keep_db: bool
) -> PreviousRun:
    leftovers = [workdir / name for name in (*RUN_DIRS, *RUN_FILES) if (workdir / name).exists()]
    if leftovers and not had_marker:
        names = ", ".join(str(p) for p in leftovers)
        raise ConfigError(
            f"{workdir} holds {names} but no {MARKER}: it was not made by a demo run, so "
            "nothing was removed; give the demo an empty or new --workdir"
        )
    marker.seek(0)
    made_db = _marked_db(marker.read())
    previous = PreviousRun()
    if db_path.exists():
        ours = made_db is not None and made_db == db_path.resolve()
        if keep_db:
            previous.db_kept = db_path
        elif ours:
            for path in (db_path, db_path.with_name(db_path.name + ".wal")):
                path.unlink(missing_ok=True)
            previous.db_replaced = db_path
        else:
            raise ConfigError(
                f"database {db_path} exists and no earlier demo run in {workdir} made it, so "
                "it was left alone; pass --keep-db to append to it, or choose another --db"
            )
    for path in leftovers:
        if path.name == "spool" and keep_db:
            previous.spools_kept = any(path.rglob("*.batch"))
            continue
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink()
        previous.removed.append(path.name)
    return previous


def _marked_db(text: str) -> Path | None:
    try:
        recorded = json.loads(text).get("db") if text.strip() else None
    except (json.JSONDecodeError, AttributeError):
        return None
    return Path(recorded) if isinstance(recorded, str) else None
