"""HMAC-SHA256 signatures of webhook bodies, and their verification for receivers.

Each webhook POST carries ``X-Sits-Timestamp: <unix seconds>`` and
``X-Sits-Signature: sha256=<hex>``, the HMAC-SHA256 under the shared secret of
``<timestamp> "." <raw body>``. The timestamp is inside the signed material, so a receiver that
rejects timestamps older than a few minutes cannot be fed a replayed request (the scheme of
Stripe's and Slack's webhooks). Verify over the raw bytes received, before parsing the JSON,
with a constant-time comparison (:func:`verify`, or docs/alerts.md for other languages).
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping

SIGNATURE_HEADER = "X-Sits-Signature"
TIMESTAMP_HEADER = "X-Sits-Timestamp"
#: Default receiver tolerance between the timestamp and its clock, in seconds.
TOLERANCE_S = 300.0


def signature(secret: bytes, timestamp_s: int, body: bytes) -> str:
    """``sha256=<hex>`` of ``timestamp_s`` and ``body`` under ``secret``."""
    mac = hmac.new(secret, f"{timestamp_s}.".encode() + body, hashlib.sha256)
    return "sha256=" + mac.hexdigest()


def signed_headers(secret: bytes, timestamp_s: int, body: bytes) -> dict[str, str]:
    """The two headers a signed webhook request carries."""
    return {
        TIMESTAMP_HEADER: str(timestamp_s),
        SIGNATURE_HEADER: signature(secret, timestamp_s, body),
    }


def verify(
    secret: bytes,
    headers: Mapping[str, str],
    body: bytes,
    now_s: float,
    *,
    tolerance_s: float = TOLERANCE_S,
) -> bool:
    """True when ``headers`` (names in any case) sign ``body`` under ``secret`` and the
    timestamp is within ``tolerance_s`` of ``now_s``."""
    lower = {k.lower(): v for k, v in headers.items()}
    stamp = lower.get(TIMESTAMP_HEADER.lower())
    given = lower.get(SIGNATURE_HEADER.lower())
    if stamp is None or given is None or not stamp.isdigit():
        return False
    if abs(now_s - int(stamp)) > tolerance_s:
        return False
    return hmac.compare_digest(signature(secret, int(stamp), body), given)
