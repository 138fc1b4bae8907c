"""The names of kubetape's Kafka topics, in one place (a deployment may rename the events topic with
``--topic``; the others follow the watcher's and the sink's defaults)."""

from __future__ import annotations

EVENTS_TOPIC = "kubetape.events"
"""Every published change, in order per object key: what the sink records and consumers read."""
STATE_TOPIC = "kubetape.state"
"""Compacted: the latest published version of each object (the watcher's memory across restarts)."""
RESUME_TOPIC = "kubetape.watch-resume"
"""Compacted: resume points (resourceVersions) and the last lifecycle of each pod."""
DEADLETTER_TOPIC = "kubetape.deadletter"
"""Messages set aside: the sink's undecodable input, the watcher's records the broker refuses."""
