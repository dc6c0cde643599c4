"""ResourceQuota admission in the Kubernetes emulator: the state around the pure rules of
:mod:`sits_observe.lab.kube.admission`.

:class:`QuotaAdmission` checks each new pod against the ResourceQuotas of its namespace (403
when one would be exceeded) and keeps their ``status`` current after every pod or quota change.
A pod's quota check and its creation happen under one lock (:attr:`QuotaAdmission._admission`,
held by the request handler), so two creations cannot both pass a check that only one of them
fits. A namespace's live pods come from the live-names index of
:mod:`sits_observe.lab.kube.feed`, and each pod version's usage is read once.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

import kmock

from sits_observe.lab.kube.admission import (
    exceeded_message,
    hard_limits,
    namespace_usage,
    pod_usage,
    quota_status,
)
from sits_observe.lab.kube.feed import WatchFeed
from sits_observe.lab.kube.query import status_error

POD = kmock.resource("", "v1", "pods")
QUOTA = kmock.resource("", "v1", "resourcequotas")

#: Pod versions whose quota usage :meth:`QuotaAdmission._pod_usage` keeps (then it starts
#: again).
_USAGE_KEPT = 10_000


class QuotaAdmission(WatchFeed):
    """The emulator's ResourceQuota admission of new pods and quota ``status`` upkeep."""

    def __init__(self) -> None:
        super().__init__()
        # Held from a pod's quota check to its creation, so two creations cannot both pass.
        self._admission = asyncio.Lock()
        # Quota usage of each pod version, by (uid, resourceVersion): a quota's status is
        # recomputed over its namespace's pods after every pod write.
        self._usage: dict[tuple[str, str], dict[str, Decimal]] = {}

    async def _admit_pod(self, request: kmock.Request) -> None:
        """403 Forbidden when the new pod would exceed a ResourceQuota of its namespace."""
        body = request.data
        meta = body.get("metadata") or {}
        namespace = meta.get("namespace")
        if not isinstance(namespace, str):
            return
        async with self._lock:
            pods = self._live(POD, namespace)
            quotas = sorted(
                self._live(QUOTA, namespace), key=lambda q: str(q["metadata"].get("name"))
            )
        requested = pod_usage(body)
        for quota in quotas:
            hard = hard_limits(quota)
            used = namespace_usage(pods, hard, self._pod_usage)
            message = exceeded_message(
                str(meta.get("name")), str(quota["metadata"].get("name")), requested, used, hard
            )
            if message is not None:
                details = {"name": str(meta.get("name")), "kind": "pods"}
                raise status_error(403, "Forbidden", message, details)

    def _pod_usage(self, pod: Mapping[str, Any]) -> dict[str, Decimal]:
        """:func:`pod_usage` of a stored pod, read once per version of it."""
        meta = pod.get("metadata") or {}
        key = (str(meta.get("uid") or ""), str(meta.get("resourceVersion") or ""))
        if not all(key):
            return pod_usage(pod)
        usage = self._usage.get(key)
        if usage is None:
            if len(self._usage) > _USAGE_KEPT:
                self._usage.clear()
            usage = self._usage[key] = pod_usage(pod)
        return usage

    async def _refresh_quotas(self, namespace: str | None) -> None:
        """Keep ``status.hard`` / ``status.used`` of the namespace's quotas current."""
        if namespace is None:
            return
        async with self._lock:
            quotas = list(self._stored(QUOTA, namespace))
            if not quotas:  # most namespaces have none: no need to add up their pods
                return
            pods = self._live(POD, namespace)
            for stored in quotas:
                hard = (stored.raw.get("spec") or {}).get("hard") or {}
                used = namespace_usage(pods, hard_limits(stored.raw), self._pod_usage)
                status = quota_status(hard, used)
                if stored.raw.get("status") == status:
                    continue
                quota = copy.deepcopy(stored.raw)
                quota["status"] = status
                quota.setdefault("metadata", {})["resourceVersion"] = self.next_revision()
                stored.create(quota)
                await self._buses[QUOTA].put({"type": "MODIFIED", "object": copy.deepcopy(quota)})
