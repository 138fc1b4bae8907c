"""Trace time: the scheduler that runs steps at scaled times (:mod:`.schedule`), the convergence
governor that holds the clock while the simulated cluster falls behind (:mod:`.governor`, measuring
:mod:`.lag`), and the sampler that watches the replay's pods and finds the speed at ``max``
(:mod:`.sampler`)."""
