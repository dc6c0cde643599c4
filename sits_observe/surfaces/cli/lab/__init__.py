"""The commands that run the lab: ``demo``, ``simulate`` and ``experiment`` (and the
experiment's progress line)."""
