"""Reading a report through a running ``sits-observe serve`` (``--service URL``).

In a cluster the DuckDB file lives on the service's volume and the service holds its lock,
so read commands ask ``GET /api/v1/reports/{name}`` with a read token and render the
:class:`~sits_observe.reports.result.Report` it answers (the same document ``-o json``
prints), exactly as they render one built from a local file.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import httpx

from sits_observe.errors import ConfigError, NoDataError, StoreError, UnknownNameError
from sits_observe.reports.result import Report
from sits_observe.reports.window import WindowRequest

#: Seconds one report request may take (a long window on a big store takes a while).
TIMEOUT_S = 120.0


def fetch_report(
    base_url: str,
    token: str,
    name: str,
    request: WindowRequest,
    settings: Mapping[str, Any],
    *,
    client: httpx.Client | None = None,
) -> Report:
    """Report ``name`` from the service at ``base_url``; ``settings`` by field name (None
    values are left out: the service applies the defaults the local run would)."""
    params: list[tuple[str, str | int | float | bool | None]] = list(request.query().items())
    for key, value in settings.items():
        if value is None:
            continue
        for item in value if isinstance(value, list | tuple) else [value]:
            params.append((key, _text(item)))
    url = f"{base_url.rstrip('/')}/api/v1/reports/{name}"
    own = client is None
    http = client or httpx.Client(timeout=httpx.Timeout(TIMEOUT_S))
    try:
        response = http.get(url, params=params, headers={"Authorization": f"Bearer {token}"})
    except httpx.HTTPError as exc:
        raise StoreError(f"GET {url} failed: {exc}; is `sits-observe serve` running?") from exc
    finally:
        if own:
            http.close()
    if response.status_code == 200:
        return Report.from_document(response.json())
    reason, detail = _refusal(response)
    if reason == "no_data":
        raise NoDataError(detail)
    if reason == "unknown_report":
        raise UnknownNameError(detail)
    if response.status_code == 400:
        raise ConfigError(detail)
    hint = " (check the token file)" if response.status_code in (401, 403) else ""
    raise StoreError(f"GET {url} answered HTTP {response.status_code}: {detail}{hint}")


def _text(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(getattr(value, "value", value))


def _refusal(response: httpx.Response) -> tuple[str, str]:
    """``(reason, detail)`` of the service's JSON error body (``("", text)`` otherwise)."""
    try:
        body = response.json()
    except ValueError:
        return "", response.text[:300]
    if isinstance(body, dict) and isinstance(body.get("detail"), str):
        return str(body.get("reason", "")), body["detail"]
    return "", response.text[:300]
