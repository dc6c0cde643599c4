"""Leader election through a ``coordination.k8s.io/v1`` Lease, so two replicas never both act.

The algorithm is client-go's ``leaderelection`` package, reduced to what one loop needs:

- **acquire**: no Lease -> create it holding it (a 409 means another replica created it
  first). A Lease held by another replica is taken over only once its record has not changed
  for ``lease_duration_s`` *as measured on our own clock* since we first saw that record
  (client-go's ``observedTime``): skew between replicas' wall clocks cannot cut the wait
  short. An empty ``holderIdentity`` (released) is free at once.
- **renew**: the holder replaces the Lease with a fresh ``renewTime``, sending the
  ``resourceVersion`` it read; a 409 means someone else changed it: we are not the leader.
- **expiry on our side**: a leader that has not renewed for ``renew_deadline_s`` (below the
  lease duration) stops acting before anyone else may take over.
- **release**: on shutdown the holder clears ``holderIdentity`` so a peer takes over at once.

Every write goes through ``PUT`` with the read ``resourceVersion`` (optimistic concurrency),
so of two replicas racing for an expired Lease exactly one wins. The clock is injectable.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from sits_observe.collectors.kube.api import JsonObject, KubeJson, object_path
from sits_observe.control.controller.apply import rfc3339
from sits_observe.control.controller.settings import ControllerSettings
from sits_observe.errors import KubeApiError

log = logging.getLogger(__name__)


def _utc_now() -> datetime:
    return datetime.now(UTC)


class LeaderElector:
    """Holds (or waits for) the controller's Lease. Call :meth:`tick` once per loop pass."""

    def __init__(
        self,
        kube: KubeJson,
        settings: ControllerSettings,
        *,
        clock: Callable[[], datetime] = _utc_now,
        on_change: Callable[[bool], None] | None = None,
    ) -> None:
        self.kube = kube
        self.identity = settings.replica_id
        self.name = settings.lease_name
        self.namespace = settings.lease_namespace
        self.duration_s = settings.lease_duration_s
        self.renew_deadline_s = settings.renew_deadline_s
        self.clock = clock
        self.on_change = on_change
        self._path = object_path("Lease", self.namespace, self.name)
        self._observed: tuple[Any, ...] | None = None
        self._observed_at: datetime | None = None
        self._renewed_at: datetime | None = None
        self._was_leader = False

    # -- state ---------------------------------------------------------------------------

    @property
    def is_leader(self) -> bool:
        """True while our last successful acquire/renew is within ``renew_deadline_s``."""
        if self._renewed_at is None:
            return False
        return (self.clock() - self._renewed_at).total_seconds() < self.renew_deadline_s

    def _notify(self) -> None:
        now = self.is_leader
        if now != self._was_leader:
            self._was_leader = now
            log.info(
                "replica %s %s the lease %s/%s",
                self.identity,
                "holds" if now else "lost",
                self.namespace,
                self.name,
            )
            if self.on_change is not None:
                self.on_change(now)

    # -- one pass --------------------------------------------------------------------------

    def tick(self) -> bool:
        """Acquire or renew once; returns :attr:`is_leader`. Never raises for API errors."""
        try:
            self._try_acquire_or_renew()
        except KubeApiError as exc:
            log.warning("lease %s/%s: %s", self.namespace, self.name, exc)
        self._notify()
        return self.is_leader

    def _spec(self, *, acquired_at: str, transitions: int) -> JsonObject:
        return {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": round(self.duration_s),
            "acquireTime": acquired_at,
            "renewTime": rfc3339(self.clock()),
            "leaseTransitions": transitions,
        }

    def _try_acquire_or_renew(self) -> None:
        now = self.clock()
        try:
            lease = self.kube.request("GET", self._path)
        except KubeApiError as exc:
            if exc.status != 404:
                raise
            self._create(now)
            return
        spec = lease.get("spec") if isinstance(lease.get("spec"), dict) else {}
        assert isinstance(spec, dict)
        holder = spec.get("holderIdentity") or ""
        record = (
            holder,
            spec.get("renewTime"),
            spec.get("acquireTime"),
            (lease.get("metadata") or {}).get("resourceVersion"),
        )
        if record != self._observed:
            self._observed, self._observed_at = record, now
        transitions = int(spec.get("leaseTransitions") or 0)
        if holder == self.identity:
            acquired = str(spec.get("acquireTime") or rfc3339(now))
            self._replace(lease, self._spec(acquired_at=acquired, transitions=transitions))
            return
        assert self._observed_at is not None
        unchanged_s = (now - self._observed_at).total_seconds()
        if holder and unchanged_s < self.duration_s:
            self._renewed_at = None  # someone else holds a live lease
            return
        self._replace(lease, self._spec(acquired_at=rfc3339(now), transitions=transitions + 1))

    def _create(self, now: datetime) -> None:
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": self.name, "namespace": self.namespace},
            "spec": self._spec(acquired_at=rfc3339(now), transitions=0),
        }
        try:
            self.kube.request(
                "POST",
                f"/apis/coordination.k8s.io/v1/namespaces/{self.namespace}/leases",
                body=body,
            )
        except KubeApiError as exc:
            if exc.status == 409:  # created by another replica in between
                self._renewed_at = None
                return
            raise
        self._renewed_at = now

    def _replace(self, lease: JsonObject, spec: JsonObject) -> None:
        body = dict(lease)
        body["spec"] = {**(lease.get("spec") or {}), **spec}
        try:
            self.kube.request("PUT", self._path, body=body)
        except KubeApiError as exc:
            if exc.status == 409:  # another replica wrote first: it won
                self._renewed_at = None
                return
            raise
        self._renewed_at = self.clock()

    def release(self) -> None:
        """Give the lease up if we hold it (best effort; errors are logged)."""
        if self._renewed_at is None:
            return
        try:
            lease = self.kube.request("GET", self._path)
            spec = lease.get("spec") if isinstance(lease.get("spec"), dict) else {}
            if (spec or {}).get("holderIdentity") == self.identity:
                body = dict(lease)
                body["spec"] = {
                    **(spec or {}),
                    "holderIdentity": "",
                    "leaseDurationSeconds": 1,
                    "renewTime": rfc3339(self.clock()),
                }
                self.kube.request("PUT", self._path, body=body)
        except KubeApiError as exc:
            log.warning("releasing lease %s/%s failed: %s", self.namespace, self.name, exc)
        self._renewed_at = None
        self._notify()
