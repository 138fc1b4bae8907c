"""Replay with the simulated Horizontal Pod Autoscaler deciding (``kubetape replay --autoscaler hpa``):
the recorded load drives the simulated pods' usage, the recorded HPAs are applied with their timers
divided by the speed, and the replicas production's HPA wrote are left to the simulated one."""
