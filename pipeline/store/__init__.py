"""The segment store: trace segments at rest, below the stages.

The sink writes it; replay, export, analytics and the controller read it. Nothing here consumes Kafka
or serves HTTP (that is the sink stage); everything about segments once written is here.

Writing and holding segments:

* :mod:`~pipeline.store.segment_store` — segment names, the store protocol, fencing, a directory store;
* :mod:`~pipeline.store.s3_store` — the same on S3 with conditional writes;
* :mod:`~pipeline.store.segment_index` — the index an object store keeps so a window lists little;
* :mod:`~pipeline.store.store_url` — ``DIR`` or ``s3://...`` to a store, per-cluster layout;
* :mod:`~pipeline.store.index_backfill` — index what older writers stored without one;
* :mod:`~pipeline.store.retention` — drop old segments, keeping the keyframes later ranges need.

Reading them back:

* :mod:`~pipeline.store.state` — the object state and the duplicate rule (the sink folds by it too);
* :mod:`~pipeline.store.catalog` — which segments cover [A, B), from headers only;
* :mod:`~pipeline.store.catalog_window` — a window's part of the catalog, from the index;
* :mod:`~pipeline.store.history` — rebuild a window from keyframe + segments;
* :mod:`~pipeline.store.export` — a window as a kubetape or SimKube v2 file, with SimKube's filters.
"""
