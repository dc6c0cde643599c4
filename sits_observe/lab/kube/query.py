"""What a list or watch asks the Kubernetes emulator for: selectors and continue tokens.

Selectors (kmock 0.8 ignores both kinds):

Equality-based terms only, as ``kubectl`` and the official clients send them: ``a=b``,
``a==b``, ``a!=b``, ``a`` (exists) and ``!a`` (absent); a field selector takes ``=`` / ``!=``
on a dotted path (``spec.nodeName``, ``metadata.name``), where a missing field reads as the
empty string (``spec.nodeName=`` selects unbound pods, as on the API server). Set-based terms
(``in``, ``notin``, parentheses) answer 400 rather than being ignored.

Continue tokens are opaque (base64 JSON of the last key served and an epoch); a token from an
older epoch answers 410 Expired, as the API server does once its compaction passed it.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

import kmock

JsonObject = dict[str, Any]


def status_error(
    code: int, reason: str, message: str, details: dict[str, Any] | None = None
) -> kmock.KubernetesError:
    """An error kmock renders as a ``kind: Status`` body, as the API server does; ``details``
    as the API server gives them (the object's ``name`` and ``kind``), where known (kmock
    formats a traceback into an error without details)."""
    return kmock.KubernetesError(status=code, reason=reason, message=message, details=details or {})


def _parse_selector(text: str, what: str) -> list[tuple[str, str, str | None]]:
    """``a=b,c!=d,e,!f`` -> [(key, op, value)]; set-based syntax answers 400."""
    terms: list[tuple[str, str, str | None]] = []
    for raw in text.split(","):
        term = raw.strip()
        if not term:
            continue
        if "(" in term or " in " in f" {term} " or " notin " in f" {term} ":
            raise status_error(400, "BadRequest", f"{what} {text!r}: set-based terms unsupported")
        if "!=" in term:
            key, value = term.split("!=", 1)
            terms.append((key.strip(), "!=", value.strip()))
        elif "==" in term:
            key, value = term.split("==", 1)
            terms.append((key.strip(), "=", value.strip()))
        elif "=" in term:
            key, value = term.split("=", 1)
            terms.append((key.strip(), "=", value.strip()))
        elif term.startswith("!"):
            terms.append((term[1:].strip(), "!", None))
        else:
            terms.append((term, "exists", None))
    return terms


def _field_value(obj: JsonObject, path: str) -> str | None:
    node: Any = obj
    for part in path.split("."):
        if not isinstance(node, dict):
            return None
        node = node.get(part)
    return None if node is None else str(node)


def selectors(
    labels: str | None, fields: str | None
) -> tuple[list[tuple[str, str, str | None]], list[tuple[str, str, str | None]]]:
    """Both selectors parsed (400 on anything unsupported)."""
    label_terms = _parse_selector(labels or "", "labelSelector")
    field_terms = _parse_selector(fields or "", "fieldSelector")
    for key, op, _ in field_terms:
        if op not in ("=", "!="):
            raise status_error(400, "BadRequest", f"fieldSelector term {key!r} needs = or !=")
    return label_terms, field_terms


def matches(obj: JsonObject, labels: str | None, fields: str | None) -> bool:
    """Whether ``obj`` satisfies both selectors (400 on anything unsupported)."""
    label_terms, field_terms = selectors(labels, fields)
    meta = obj.get("metadata") or {}
    have = meta.get("labels") or {}
    for key, op, value in label_terms:
        present = key in have
        if (
            (op == "=" and have.get(key) != value)
            or (op == "!=" and present and have.get(key) == value)
            or (op == "!" and present)
            or (op == "exists" and not present)
        ):
            return False
    for key, op, value in field_terms:
        actual = _field_value(obj, key) or ""
        if (op == "=") != (actual == value):
            return False
    return True


def encode_token(after: tuple[str, str], epoch: int) -> str:
    """The continue token resuming a list after the key ``after``."""
    payload = json.dumps({"after": list(after), "epoch": epoch})
    return base64.urlsafe_b64encode(payload.encode()).decode()


def decode_token(token: str, epoch: int) -> tuple[str, str]:
    """The key a continue token resumes after; 400 when unreadable, 410 when expired."""
    try:
        payload = json.loads(base64.urlsafe_b64decode(token.encode()))
        after = (str(payload["after"][0]), str(payload["after"][1]))
        sent_epoch = int(payload["epoch"])
    except (binascii.Error, ValueError, KeyError, IndexError, TypeError) as exc:
        raise status_error(400, "BadRequest", f"continue key {token!r} is not valid") from exc
    if sent_epoch != epoch:
        raise status_error(
            410,
            "Expired",
            "The provided continue parameter is too old to display a consistent list result. "
            "You can start a new list without the continue parameter.",
        )
    return after
