"""The ``sits-observe`` command line (Typer + Rich)."""
