"""The Rebalanser operator: reconciles ResourceGroup custom resources into ZooKeeper groups.

Layout (docs/operator.md, "Architecture"): the spec and CRD (``models``, ``crdgen``, ``crdcompat``,
``tenancy``), ``controller/`` (one controller per ResourceGroup: the only writer of its znodes and
status; a pure plan), ``apply/`` (spec -> znodes, rotation, deletion), ``status/`` (the status
mirror, pure status and tuning), ``failover/`` (confirmed-death failover), and the edges: ``handlers``
(thin kopf handlers), ``runtime`` (shared context), ``kube`` / ``zkpool`` / ``zktls`` (clients),
``metrics``, ``clusterid``, ``main`` / ``launch`` (CLI).
"""
