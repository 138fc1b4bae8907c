"""Analytics: extra consumers of the recorded stream, simulation runs as data, comparisons, sweeps.

* :mod:`~pipeline.analytics.consumer` — the consumer interface (start here to write one);
* :mod:`~pipeline.analytics.runner` — runs a consumer over its own consumer group or a trace file;
* :mod:`~pipeline.analytics.builtin_timeline`, :mod:`~pipeline.analytics.builtin_metrics` — built-ins;
* :mod:`~pipeline.analytics.timeline` — the per-second fold shared by recordings and replays;
* :mod:`~pipeline.analytics.runs` — run directories; :mod:`~pipeline.analytics.compare` — fidelity and
  run-vs-run intervals (:mod:`~pipeline.analytics.stats`); :mod:`~pipeline.analytics.pareto` — frontiers;
* :mod:`~pipeline.analytics.report_html` — the self-contained HTML report (:mod:`~pipeline.analytics.svg`).
"""
