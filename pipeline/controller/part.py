"""What each part of the controller (the Lease keeper, the reconciler) works with: the cluster, the
controller's settings and a clock, injected once here so that tests can set the time."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

from pipeline.controller.ports import ControllerCluster
from pipeline.controller.settings import ControllerSettings


def now_utc() -> datetime:
    return datetime.now(UTC)


class ControllerPart:
    def __init__(
        self,
        cluster: ControllerCluster,
        settings: ControllerSettings,
        clock: Callable[[], datetime] = now_utc,
    ) -> None:
        self._cluster = cluster
        self._settings = settings
        self._clock = clock
