"""One active controller per cluster through a coordination.k8s.io Lease (client-go's leader election, small).

The holder renews ``renewTime`` every ``renew_interval_s``; a holder silent for ``leaseDurationSeconds``
has lost it and the next instance takes over (``leaseTransitions`` + 1). Writes carry the
resourceVersion they read, so two instances racing for an expired Lease cannot both win. Because only
the holder reconciles, and the holder runs one Simulation at a time, the Lease is also what keeps
simulations from overlapping in one cluster. Its ``kubetape.dev/active-simulation`` annotation names the
running Simulation, for people (the controller reads that from the Simulations' status).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from pipeline.controller.part import ControllerPart
from pipeline.model.errors import ConflictError

log = logging.getLogger(__name__)

ACTIVE_SIMULATION_ANNOTATION = "kubetape.dev/active-simulation"
LEASE_API_VERSION = "coordination.k8s.io/v1"


def format_micro_time(moment: datetime) -> str:
    """Kubernetes MicroTime: RFC 3339 with microseconds, UTC."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def format_time(moment: datetime) -> str:
    """Kubernetes Time (``date-time`` in status fields): RFC 3339 in whole seconds, UTC."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(text: str | None) -> datetime | None:
    if not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None


@dataclass(frozen=True, slots=True)
class LeaseState:
    """Who holds the Lease and until when, as read from the apiserver."""

    holder: str
    expires: datetime | None

    @classmethod
    def of(cls, lease: Mapping[str, Any]) -> LeaseState:
        spec = lease.get("spec") or {}
        renewed = parse_time(spec.get("renewTime")) or parse_time(spec.get("acquireTime"))
        duration = spec.get("leaseDurationSeconds") or 0
        expires = renewed + timedelta(seconds=duration) if renewed else None
        return cls(str(spec.get("holderIdentity") or ""), expires)

    def free_for(self, identity: str, now: datetime) -> bool:
        """Whether ``identity`` may hold the Lease now: it holds it already, nobody does, or it expired."""
        return self.holder in ("", identity) or self.expires is None or self.expires <= now


class LeaseKeeper(ControllerPart):
    """Acquires and renews the Lease for ``settings.identity``; :attr:`held` says whether it may act."""

    held = False
    holder = ""
    """The current holder as last seen ('' when nobody)."""

    def _body(self, active_simulation: str | None, transitions: int, acquired: str) -> dict[str, Any]:
        now = format_micro_time(self._clock())
        return {
            "apiVersion": LEASE_API_VERSION,
            "kind": "Lease",
            "metadata": {
                "name": self._settings.lease_name,
                "namespace": self._settings.namespace,
                "annotations": {ACTIVE_SIMULATION_ANNOTATION: active_simulation or ""},
            },
            "spec": {
                "holderIdentity": self._settings.identity,
                "leaseDurationSeconds": self._settings.lease_duration_s,
                "acquireTime": acquired or now,
                "renewTime": now,
                "leaseTransitions": transitions,
            },
        }

    async def try_hold(self, active_simulation: str | None = None) -> bool:
        """Acquire or renew; False (and :attr:`held` False) while another live instance holds it."""
        settings = self._settings
        lease = await self._cluster.get(LEASE_API_VERSION, "Lease", settings.namespace, settings.lease_name)
        try:
            if lease is None:
                await self._cluster.create(self._body(active_simulation, 0, ""))
                self._set_held(True, settings.identity)
                return True
            state = LeaseState.of(lease)
            if not state.free_for(settings.identity, self._clock()):
                self._set_held(False, state.holder)
                return False
            spec = lease.get("spec") or {}
            mine = state.holder == settings.identity
            transitions = int(spec.get("leaseTransitions") or 0) + (0 if mine else 1)
            body = self._body(active_simulation, transitions, spec.get("acquireTime", "") if mine else "")
            body["metadata"]["resourceVersion"] = lease["metadata"]["resourceVersion"]
            await self._cluster.replace(body)
        except ConflictError:
            self._set_held(False, "")  # another instance wrote first; it holds the Lease now
            return False
        self._set_held(True, settings.identity)
        return True

    async def release(self) -> None:
        """Give the Lease up at once (on a clean shutdown), so the next instance need not wait it out."""
        if not self.held:
            return
        settings = self._settings
        lease = await self._cluster.get(LEASE_API_VERSION, "Lease", settings.namespace, settings.lease_name)
        if lease is not None and LeaseState.of(lease).holder == settings.identity:
            lease["spec"]["holderIdentity"] = ""
            lease["spec"]["renewTime"] = None
            # a conflict: another instance took it over meanwhile, nothing left to release
            with contextlib.suppress(ConflictError):
                await self._cluster.replace(lease)
        self._set_held(False, "")

    def _set_held(self, held: bool, holder: str) -> None:
        if held != self.held:
            log.info(
                "lease %s/%s %s",
                self._settings.namespace,
                self._settings.lease_name,
                "acquired" if held else f"not held (holder: {holder or 'nobody'})",
            )
        self.held, self.holder = held, holder
