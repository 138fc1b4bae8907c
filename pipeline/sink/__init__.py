"""The sink stage: ``kubetape.events`` → durable, deduplicated, time-ordered trace segments.

* :mod:`~pipeline.sink.compactor` — one partition's events into segments (windows, idleness, keyframes);
* :mod:`~pipeline.sink.native_fold` — the compactor's duplicate fold in C, in bulk;
* :mod:`~pipeline.sink.sink` — the consume → compact → write durably → commit loop and rebalances;
* :mod:`~pipeline.sink.restore` — a partition's compactor restored from the store after a restart;
* :mod:`~pipeline.sink.writer` — closed segments written to the store off the event loop;
* :mod:`~pipeline.sink.service` — ``kubetape sink``: loop, HTTP (health, metrics, POST /export), SIGTERM;
* :mod:`~pipeline.sink.synthetic` — a deterministic workload for tests and benchmarks.

Segments at rest (the store, the catalog, window rebuilds, exports, retention) are :mod:`pipeline.store`.
"""
