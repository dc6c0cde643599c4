"""Human-readable descriptions of the table contract (used by docs/schema.md and the CLI)."""

from __future__ import annotations

from sits_observe.domain.tables import TABLES


def schema_markdown() -> str:
    """Every sample table as a Markdown section: column, Arrow type, meaning."""
    parts: list[str] = []
    for spec in TABLES.values():
        parts.append(f"## `{spec.name}`\n\n{spec.doc[0].upper()}{spec.doc[1:]}.\n")
        parts.append("| column | type | meaning |\n|---|---|---|")
        for field in spec.schema:
            meta = field.metadata or {}
            doc = meta.get(b"doc", b"").decode()
            parts.append(f"| `{field.name}` | {field.type} | {doc} |")
        parts.append("")
    return "\n".join(parts)
