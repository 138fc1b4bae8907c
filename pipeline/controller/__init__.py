"""The Simulation controller: declarative replays in a simulation cluster (SimKube's sk-ctrl for kubetape).

``spec`` reads a Simulation, ``objects`` builds the replayer Jobs it runs, ``progress`` reads their
outcome back, ``lease`` keeps one controller (and so one simulation) active per cluster, ``reconciler``
drives one pass over every Simulation, and ``controller`` runs the passes on watch events and timers.
"""
