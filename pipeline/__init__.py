"""kubetape: record a Kubernetes cluster onto Kafka and replay it in a simulated (KWOK) cluster.

Layers (enforced by import-linter, see pyproject.toml):
``model`` → ``formats`` → ``io`` → stages (``watch``, ``sink``, ``replay``) → ``services``.
``stack`` provisions the local real stack and depends on the standard library only.
"""
