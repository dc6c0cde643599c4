"""Who may call what: bearer tokens by role, and ingest tokens bound to one node.

Roles (docs/api.md, "Authentication"):

- ``read``: ``GET /api/v1/tables*`` (every ``/api/v1/*`` route but ingest);
- ``ingest``: ``POST /api/v1/ingest`` and ``POST /v1/traces``;
- ``scrape``: ``GET /metrics``, only once a scrape token is configured (Prometheus sends it
  with ``authorization: {credentials_file: ...}``); without one ``/metrics`` stays open.

Token sources: the all-roles token (``--token-file`` or ``SITS_TOKEN``, what a single-token
install and the demo use) holds every role; ``--read-token-file`` and ``--scrape-token-file``
hold one token each; ``--ingest-tokens-file`` holds lines ``token [node]``. A token with a
node may only write that node's rows: the batch's ``X-Sits-Node`` header must name the node
and every ``node`` value of the batch's tables must be that node or NULL (403
``node_mismatch`` otherwise), so one compromised node cannot write another's samples.

Tokens are looked up by their SHA-256 digest, so the lookup time does not depend on how
much of a guess matches a real token, and 5,000 node tokens cost one hash per request.
Token values never appear in messages.

Routes with query parameters are guarded by :class:`AuthMiddleware`, which runs before
routing and validation, so an unauthenticated request is a 401 whatever its parameters
(never a 422 that would reveal the route's parameters). Ingest and OTLP authenticate in their
handlers (they count refusals in their own counters and answer in their own formats) through a
:class:`RoleGuard`.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from sits_observe.errors import ConfigError
from sits_observe.surfaces.service.http.json_answers import Refusal

#: A node name as the wire format allows it (``collectors/agent/wire.py``, NODE_PATTERN).
_NODE = re.compile(r"^[A-Za-z0-9._-]{1,253}$")
_REALM = 'Bearer realm="sits_observe"'
#: Where the authenticated caller is kept in the request's state.
CALLER_STATE = "sits_caller"


class Role(StrEnum):
    """What a token may do."""

    read = "read"
    ingest = "ingest"
    scrape = "scrape"


ALL_ROLES = frozenset(Role)
#: Counts one refusal of the middleware: ``(role, reason)``.
OnRefused = Callable[[Role, str], None]


@dataclass(frozen=True)
class Caller:
    """An authenticated caller: what its token may do and, for a node token, its node."""

    roles: frozenset[Role]
    node: str | None = None
    source: str = "token"

    def rows_refusal(self, tables: Mapping[str, pa.Table]) -> Refusal | None:
        """A 403 when a node-bound caller sends rows of another node (NULL is allowed)."""
        if self.node is None:
            return None
        for name, table in tables.items():
            if "node" not in table.column_names:
                continue
            others = [v for v in pc.unique(table["node"]).to_pylist() if v not in (None, self.node)]
            if others:
                shown = ", ".join(repr(v) for v in sorted(map(str, others))[:3])
                return Refusal(
                    403,
                    "node_mismatch",
                    f"this ingest token is bound to node {self.node!r}, but table {name!r} "
                    f"has rows of node {shown}; a node may only send its own rows",
                )
        return None


@dataclass(frozen=True)
class Tokens:
    """Every configured token by its SHA-256 digest; ``scrape_protected`` when a scrape
    token exists (``/metrics`` then needs one)."""

    by_digest: Mapping[bytes, Caller] = field(default_factory=dict)
    scrape_protected: bool = False


def digest(token: str) -> bytes:
    """The lookup key of ``token``."""
    return hashlib.sha256(token.encode("utf-8")).digest()


def read_token_file(path: Path, what: str) -> str:
    """The one token in ``path`` (whitespace around it ignored); :class:`ConfigError` else."""
    token = _read(path, what).strip()
    _check_token(token, f"{what} {path}")
    return token


def read_ingest_tokens(path: Path) -> dict[str, str | None]:
    """``token [node]`` lines of ``path`` (``#`` comments and blank lines ignored)."""
    tokens: dict[str, str | None] = {}
    for number, line in enumerate(_read(path, "ingest tokens file").splitlines(), start=1):
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        where = f"ingest tokens file {path}, line {number}"
        if len(words) > 2:
            raise ConfigError(f"{where}: expected 'token [node]', found {len(words)} words")
        token, node = words[0], (words[1] if len(words) == 2 else None)
        _check_token(token, where)
        if node is not None and not _NODE.match(node):
            raise ConfigError(
                f"{where}: node {node!r} is not a node name "
                "(letters, digits, '.', '_' or '-', at most 253 characters)"
            )
        if token in tokens:
            raise ConfigError(f"{where}: this token is already on an earlier line")
        tokens[token] = node
    if not tokens:
        raise ConfigError(f"ingest tokens file {path} holds no token; add lines 'token [node]'")
    return tokens


def build_tokens(
    *,
    all_roles: str | None,
    read: str | None = None,
    scrape: str | None = None,
    ingest: Mapping[str, str | None] | None = None,
) -> Tokens:
    """The token table; :class:`ConfigError` when no token can write, or one token is given
    two roles (which one would it have?)."""
    if all_roles is None and not ingest:
        raise ConfigError(
            "no bearer token: pass --token-file FILE or set SITS_TOKEN (or give "
            "--ingest-tokens-file); the service never accepts unauthenticated writes"
        )
    entries: list[tuple[str, Caller]] = []
    if all_roles is not None:
        entries.append((all_roles, Caller(ALL_ROLES, source="the all-roles token")))
    if read is not None:
        entries.append((read, Caller(frozenset({Role.read}), source="the read token")))
    if scrape is not None:
        entries.append((scrape, Caller(frozenset({Role.scrape}), source="the scrape token")))
    for token, node in (ingest or {}).items():
        entries.append((token, Caller(frozenset({Role.ingest}), node, "an ingest token")))
    by_digest: dict[bytes, Caller] = {}
    for token, caller in entries:
        key = digest(token)
        if key in by_digest:
            raise ConfigError(
                f"{caller.source} is also {by_digest[key].source}; give each role its own token"
            )
        by_digest[key] = caller
    return Tokens(by_digest, scrape_protected=scrape is not None)


class TokenAuth:
    """Checks ``Authorization: Bearer <token>`` against :class:`Tokens`."""

    def __init__(self, tokens: Tokens) -> None:
        self._tokens = tokens

    @property
    def scrape_protected(self) -> bool:
        """True when ``/metrics`` needs a token."""
        return self._tokens.scrape_protected

    def authenticate(self, headers: Headers, role: Role) -> Caller | Refusal:
        """The caller when its token holds ``role``: 401 without a valid token, 403 when the
        token is valid but may not do this."""
        header = headers.get("authorization", "")
        if not header:
            return Refusal(
                401,
                "unauthorized",
                "missing Authorization header; send 'Authorization: Bearer <token>'",
                {"WWW-Authenticate": _REALM},
            )
        scheme, _, presented = header.partition(" ")
        caller = None
        if scheme.lower() == "bearer" and presented.strip():
            caller = self._tokens.by_digest.get(digest(presented.strip()))
        if caller is None:
            return Refusal(
                401,
                "unauthorized",
                "invalid bearer token",
                {"WWW-Authenticate": f'{_REALM}, error="invalid_token"'},
            )
        if role not in caller.roles:
            return Refusal(
                403,
                "forbidden",
                f"{caller.source} may not {role.value}; use the all-roles token or a "
                f"{role.value} token (docs/api.md, Authentication)",
            )
        return caller

    def guard(self, role: Role, *, node_header: str | None = None) -> RoleGuard:
        """A per-route checker for handlers that authenticate themselves."""
        return RoleGuard(self, role, node_header)


class RoleGuard:
    """``check(request)`` for one role; with ``node_header``, a node-bound token must send
    its node in that header. The caller is kept in ``request.state``."""

    def __init__(self, auth: TokenAuth, role: Role, node_header: str | None) -> None:
        self._auth = auth
        self._role = role
        self._node_header = node_header

    def check(self, request: Request) -> Refusal | None:
        """None when the request may go on, else why it is refused (401 / 403)."""
        caller = self._auth.authenticate(request.headers, self._role)
        if isinstance(caller, Refusal):
            return caller
        if caller.node is not None and self._node_header is not None:
            sent = request.headers.get(self._node_header)
            if sent != caller.node:
                return Refusal(
                    403,
                    "node_mismatch",
                    f"this ingest token is bound to node {caller.node!r}; header "
                    f"{self._node_header} is {sent!r}",
                )
        setattr(request.state, CALLER_STATE, caller)
        return None

    def check_rows(self, request: Request, tables: Mapping[str, pa.Table]) -> Refusal | None:
        """A 403 when the authenticated caller is bound to a node and ``tables`` hold rows
        of another node."""
        caller: Caller | None = getattr(request.state, CALLER_STATE, None)
        return None if caller is None else caller.rows_refusal(tables)


class AuthMiddleware:
    """Authenticates guarded paths before routing, so a refusal never depends on the
    request's parameters. ``rules`` are ``(path prefix, role)``, first match wins;
    ``exempt`` paths authenticate in their handlers. ``on_refused(role, reason)`` counts."""

    def __init__(
        self,
        app: ASGIApp,
        auth: TokenAuth,
        rules: tuple[tuple[str, Role], ...],
        exempt: frozenset[str],
        on_refused: OnRefused,
    ) -> None:
        self._app = app
        self._auth = auth
        self._rules = rules
        self._exempt = exempt
        self._on_refused = on_refused

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = str(scope.get("path", ""))
        role = None
        if scope["type"] == "http" and path not in self._exempt:
            role = next((r for prefix, r in self._rules if path.startswith(prefix)), None)
        if role is not None:
            caller = self._auth.authenticate(Headers(scope=scope), role)
            if isinstance(caller, Refusal):
                self._on_refused(role, caller.reason)
                await caller.response()(scope, receive, send)
                return
            scope.setdefault("state", {})[CALLER_STATE] = caller
        await self._app(scope, receive, send)


def _read(path: Path, what: str) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read {what} {path}: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{what} {path} is not UTF-8 text") from exc


def _check_token(token: str, where: str) -> None:
    if not token or any(c.isspace() for c in token):
        raise ConfigError(f"{where}: the token must be non-empty and contain no whitespace")
