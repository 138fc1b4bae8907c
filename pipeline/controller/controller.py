"""The controller's run loop: hold the Lease, reconcile on every change and at least every renewal.

Watches of Simulations and of the controller's Jobs and pods only wake the loop; each pass reads the
whole current state (:class:`~pipeline.controller.reconciler.Reconciler`), so missed or repeated watch
events cannot lead it astray. Only the Lease holder reconciles; the others renew nothing and check the
Lease every ``renew_interval_s``. A failed pass is logged and retried on the next wake-up: one bad
Simulation or a short apiserver outage never stops the controller.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from datetime import datetime

from pipeline.controller.lease import LeaseKeeper
from pipeline.controller.objects import MANAGED_BY_SELECTOR
from pipeline.controller.part import now_utc
from pipeline.controller.ports import ControllerClient
from pipeline.controller.reconciler import Reconciler
from pipeline.controller.settings import ControllerSettings
from pipeline.controller.spec import API_VERSION, KIND
from pipeline.io.metrics import Metrics
from pipeline.model.errors import KubetapeError, UnknownKindError

log = logging.getLogger(__name__)


class Controller:
    """Run with :meth:`run` until ``stop`` is set; :attr:`ready` turns True after the first Lease check."""

    def __init__(
        self,
        cluster: ControllerClient,
        settings: ControllerSettings,
        metrics: Metrics,
        clock: Callable[[], datetime] = now_utc,
    ) -> None:
        self._cluster = cluster
        self._settings = settings
        self._metrics = metrics
        self.lease = LeaseKeeper(cluster, settings, clock)
        self.reconciler = Reconciler(cluster, settings, clock)
        self.ready = False
        self.active: str | None = None
        self._wake = asyncio.Event()
        metrics.counter("controller_passes_total", "reconcile passes run")
        metrics.counter("controller_pass_errors_total", "reconcile passes that failed (retried)")
        metrics.gauge("controller_leader", "1 while this instance holds the Lease")

    async def run(self, stop: asyncio.Event) -> None:
        ns = self._settings.namespace
        feeds = [
            asyncio.create_task(
                self._follow(API_VERSION, KIND, None), name="kubetape-controller watch simulations"
            ),
            asyncio.create_task(self._follow("batch/v1", "Job", ns), name="kubetape-controller watch jobs"),
            asyncio.create_task(self._follow("v1", "Pod", ns), name="kubetape-controller watch pods"),
        ]
        try:
            while not stop.is_set():
                self._wake.clear()  # before the pass: a change seen during it triggers the next one
                await self._pass()
                waiter = asyncio.create_task(self._wake.wait())
                stopper = asyncio.create_task(stop.wait())
                await asyncio.wait(
                    {waiter, stopper},
                    timeout=self._settings.renew_interval_s,
                    return_when=asyncio.FIRST_COMPLETED,
                )
                waiter.cancel()
                stopper.cancel()
        finally:
            for feed in feeds:
                feed.cancel()
            for feed in feeds:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await feed
            with contextlib.suppress(Exception):
                await self.lease.release()
            self._metrics.set("controller_leader", 0)

    async def _pass(self) -> None:
        try:
            held = await self.lease.try_hold(self.active)
        except Exception as exc:  # without a Lease answer, act as if not holding it
            log.warning("could not check the Lease (%s); not reconciling until it answers", exc)
            self.lease.held = False
            held = False
        self.ready = True
        self._metrics.set("controller_leader", 1 if held else 0)
        if not held:
            return
        self._metrics.inc("controller_passes_total")
        try:
            before, self.active = self.active, await self.reconciler.reconcile_all()
            if self.active != before:  # name the new active Simulation on the Lease right away
                await self.lease.try_hold(self.active)
        except UnknownKindError:
            self._metrics.inc("controller_pass_errors_total")
            log.error(
                "the cluster serves no Simulations: install the CRD (kubectl apply -k k8s/sim, or "
                "kubectl apply -f k8s/sim/simulation-crd.yaml); checking again in %.0f s",
                self._settings.renew_interval_s,
            )
        except KubetapeError as exc:  # refused or unavailable: the message says which and why
            self._metrics.inc("controller_pass_errors_total")
            log.warning("reconcile pass failed, retrying: %s", exc)
        except Exception:
            self._metrics.inc("controller_pass_errors_total")
            log.exception(
                "reconcile pass failed; retrying on the next change or in %.0f s",
                self._settings.renew_interval_s,
            )

    async def _follow(self, api_version: str, kind: str, namespace: str | None) -> None:
        selector = "" if namespace is None else MANAGED_BY_SELECTOR
        while True:
            try:
                async for _ in self._cluster.watch_changes(
                    api_version, kind, namespace=namespace, label_selector=selector
                ):
                    self._wake.set()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a broken feed only delays passes to the timer
                log.warning(
                    "watch of %s failed (%s); the timer keeps reconciling, retrying the watch", kind, exc
                )
            await asyncio.sleep(self._settings.renew_interval_s)
