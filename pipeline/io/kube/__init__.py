"""Kubernetes API access, each concept in one module.

* :mod:`.connect`: an ``ApiClient`` from a kubeconfig or the pod's service account (the CLI resolves
  ``$KUBECONFIG``, in :mod:`services.environment`);
* :mod:`.status`: the one mapping of the apiserver's HTTP statuses (and of an unreachable apiserver) to
  :mod:`pipeline.model.errors` (a new status is a change there only);
* :mod:`.transport`: JSON requests and streamed GETs with the client's credentials;
* :mod:`.types`: what the API describes (resources, watch events, lists), free of third-party imports;
* :mod:`.cluster`: the ``Cluster`` protocol; each stage's port is a subset of it;
* :mod:`.discovery`: kinds resolved to resources once per group/version;
* :mod:`.watch`: the one list-then-watch stream the watcher and the controller share;
* :mod:`.client`: :class:`~.client.KubeClient`, the one implementation of ``Cluster``;
* :mod:`.pod_watch`: the pods of one label as counts kept from a watch (the replay's sampler).

Nothing is re-exported here, so that importing :mod:`.types` or :mod:`.cluster` (as stages and their
in-memory fakes do) does not load kubernetes-asyncio.
"""
