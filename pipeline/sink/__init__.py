"""The sink stage: ``kubetape.events`` → durable, deduplicated, time-ordered trace segments → exports.

* :mod:`~pipeline.sink.state` — the object state and the duplicate rule (redelivery, re-list);
* :mod:`~pipeline.sink.compactor` — one partition's events into segments (windows, idleness, keyframes);
* :mod:`~pipeline.sink.sink` — the consume → compact → write durably → commit loop and rebalances;
* :mod:`~pipeline.sink.catalog` — which segments cover [A, B), from headers only;
* :mod:`~pipeline.sink.history` — restore a partition, rebuild a window from keyframe + segments;
* :mod:`~pipeline.sink.export` — a window as a kubetape or SimKube v2 file, with SimKube's filters;
* :mod:`~pipeline.sink.retention` — drop old segments, keeping the keyframes later ranges need;
* :mod:`~pipeline.sink.service` — ``kubetape sink``: loop, HTTP (health, metrics, POST /export), SIGTERM;
* :mod:`~pipeline.sink.synthetic` — a deterministic workload for tests and benchmarks.
"""
