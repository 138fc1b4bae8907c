"""Well-known node labels that more than one layer reads or writes."""

from __future__ import annotations

HOSTNAME_LABEL = "kubernetes.io/hostname"
ZONE_LABEL = "topology.kubernetes.io/zone"
