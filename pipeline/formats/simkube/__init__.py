"""SimKube trace files: the model (:mod:`.model`), the reader (:mod:`.read`, versions 1-3) and the
writer (:mod:`.write`, versions 2 and 3)."""

from pipeline.formats.simkube.model import (
    READABLE_VERSIONS,
    SIMKUBE_TRACE_VERSION,
    SIMKUBE_V3,
    WRITABLE_VERSIONS,
    SimkubeEvent,
    SimkubeLifecycle,
    SimkubeOwner,
    SimkubeTrace,
    index_from_events,
    versions_text,
)
from pipeline.formats.simkube.read import read_simkube_trace
from pipeline.formats.simkube.write import (
    check_writable_version,
    simkube_compatibility_problems,
    simkube_to_wire,
    with_version,
    write_simkube_trace,
)

__all__ = [
    "READABLE_VERSIONS",
    "SIMKUBE_TRACE_VERSION",
    "SIMKUBE_V3",
    "WRITABLE_VERSIONS",
    "SimkubeEvent",
    "SimkubeLifecycle",
    "SimkubeOwner",
    "SimkubeTrace",
    "check_writable_version",
    "index_from_events",
    "read_simkube_trace",
    "simkube_compatibility_problems",
    "simkube_to_wire",
    "versions_text",
    "with_version",
    "write_simkube_trace",
]
