"""The controller's pure ``plan()``: its inputs, the value types it returns, the proposals of one
pass (the rules' proposals with hysteresis, combined onto owner workloads) and the safety rules.

No I/O and no store: an import-linter contract forbids DuckDB here, so a plan can be computed
offline (``sits-observe recommend``), tested exhaustively and timed. Reading the signals and the
cluster, applying, recording and the loop live beside this package in the controller.
"""
