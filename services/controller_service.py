"""The Simulation controller service's wiring: the Kubernetes client, the controller and its HTTP surface
(``/healthz``, ``/readyz``, ``/metrics``), until SIGTERM/SIGINT, when it finishes its pass, gives up its
Lease and exits 0. ``kubetape controller`` (services/commands/controller.py) turns its flags into
:class:`ControllerServiceSettings`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from pathlib import Path

from pipeline.controller.settings import ControllerSettings
from pipeline.io.http import HttpSettings
from services.serving import on_stop_signals, serving_http

log = logging.getLogger("kubetape.controller")


@dataclass(frozen=True, slots=True)
class ControllerServiceSettings:
    """Everything ``kubetape controller`` needs; see ``kubetape controller --help`` for each default."""

    controller: ControllerSettings
    http: HttpSettings
    kubeconfig: Path | None = None
    """None: the pod's service account (running inside the simulation cluster); ``--kubeconfig``
    defaults to $KUBECONFIG (services.environment)."""
    context: str | None = None


async def serve_controller(settings: ControllerServiceSettings) -> int:
    """Run the controller until SIGTERM/SIGINT; returns the exit code."""
    from pipeline.controller.controller import Controller
    from pipeline.io.http import create_app
    from pipeline.io.kube.client import controller_client
    from pipeline.io.kube.connect import kube_api
    from pipeline.io.metrics import Metrics

    stop = asyncio.Event()
    metrics = Metrics()
    with on_stop_signals(stop.set):
        async with kube_api(settings.kubeconfig, settings.context) as api:
            controller = Controller(controller_client(api), settings.controller, metrics)
            async with serving_http(create_app(metrics, lambda: controller.ready), settings.http) as port:
                log.info(
                    "controller %s: namespace %s, image %s; health on http://%s:%d",
                    settings.controller.identity,
                    settings.controller.namespace,
                    settings.controller.image,
                    settings.http.host,
                    port,
                )
                started = time.monotonic()
                await controller.run(stop)
            log.info("stopped cleanly after %.0f s (Lease released)", time.monotonic() - started)
    return 0
