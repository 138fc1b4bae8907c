"""The replay stage: a trace replayed into a simulated (KWOK) cluster at a chosen speed.

* :mod:`.run`: the one entry point, a :class:`~.run.ReplayRun` of a :class:`~.run.ReplaySpec` (the
  source, the cluster, the settings, the autoscaler, the report), which the commands and benchmarks call;
* :mod:`.settings`, :mod:`.inputs`, :mod:`.sources`, :mod:`.plan`: what a replay is asked for, the files
  read beside it, the trace read from a topic, and the trace turned into scheduler steps;
* :mod:`.replayer`, :mod:`.setup`, :mod:`.apply`, :mod:`.rewrite`, :mod:`.ports`: one replay's lifecycle,
  its objects rewritten and written to the cluster;
* :mod:`.clock`: trace time (the scheduler, the convergence governor and the lag it keeps, the sampler);
* :mod:`.autoscale`: an autoscaler's pools and timers scaled by the speed, its nodes and figures;
* :mod:`.report`: the report, its fidelity verdict and the pod tally it is judged on.
"""
