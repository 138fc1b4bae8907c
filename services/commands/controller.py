"""``kubetape controller``: run the Simulation controller (one replayer Job per repetition, one
Simulation at a time per cluster; see ``kubetape sim``).

Its flags are built once into a frozen :class:`~services.controller_service.ControllerServiceSettings`;
the service itself is wired in :mod:`services.controller_service`.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket

from pipeline.controller.settings import (
    DEFAULT_IMAGE,
    DEFAULT_LEASE_NAME,
    DEFAULT_NAMESPACE,
    DEFAULT_SERVICE_ACCOUNT,
    ControllerSettings,
)
from pipeline.io.http import HttpSettings
from pipeline.model.errors import ConfigError
from services.controller_service import ControllerServiceSettings, serve_controller
from services.environment import env_default
from services.flags import add_http_flags, add_kubeconfig_flags, add_log_flags


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_kubeconfig_flags(
        parser, what="the simulation cluster", default="$KUBECONFIG, else in-cluster credentials"
    )
    parser.add_argument(
        "--namespace",
        default=env_default("POD_NAMESPACE") or DEFAULT_NAMESPACE,
        help=f"namespace of the Jobs and the Lease (default: $POD_NAMESPACE, else {DEFAULT_NAMESPACE})",
    )
    parser.add_argument(
        "--image",
        default=env_default("KUBETAPE_IMAGE") or DEFAULT_IMAGE,
        help=f"kubetape image the replayer Jobs run (default: $KUBETAPE_IMAGE, else {DEFAULT_IMAGE})",
    )
    parser.add_argument(
        "--service-account",
        default=DEFAULT_SERVICE_ACCOUNT,
        help=f"service account of the replayer Jobs (default: {DEFAULT_SERVICE_ACCOUNT})",
    )
    parser.add_argument(
        "--identity",
        default=env_default("POD_NAME") or f"{socket.gethostname()}-{os.getpid()}",
        help="Lease holder identity (default: $POD_NAME, else host-pid)",
    )
    parser.add_argument("--lease-name", default=DEFAULT_LEASE_NAME, help=f"(default: {DEFAULT_LEASE_NAME})")
    parser.add_argument(
        "--lease-duration", type=int, default=15, help="seconds a silent holder keeps the Lease (default 15)"
    )
    parser.add_argument(
        "--renew-interval",
        type=float,
        default=5.0,
        help="seconds between Lease renewals and passes (default 5)",
    )
    add_http_flags(parser, port=8081)
    add_log_flags(parser)
    parser.set_defaults(settings=settings_from_args, func=_run)


def settings_from_args(args: argparse.Namespace) -> ControllerServiceSettings:
    if not 0 < args.renew_interval < args.lease_duration:
        raise ConfigError(
            f"--renew-interval {args.renew_interval:g} must be above 0 and below --lease-duration "
            f"{args.lease_duration} (else the Lease expires between renewals); e.g. 5 and 15"
        )
    controller = ControllerSettings(
        identity=args.identity,
        namespace=args.namespace,
        image=args.image,
        service_account=args.service_account,
        lease_name=args.lease_name,
        lease_duration_s=args.lease_duration,
        renew_interval_s=args.renew_interval,
    )
    return ControllerServiceSettings(
        controller=controller,
        http=HttpSettings(host=args.http_host, port=args.http_port),
        kubeconfig=args.kubeconfig,
        context=args.context,
    )


def _run(settings: ControllerServiceSettings) -> int:
    return asyncio.run(serve_controller(settings))
