"""The Rebalanser operator: reconciles ResourceGroup custom resources into ZooKeeper groups.

Layers, each importing only from itself and the ones below (docs/operator.md, "Code layout";
tests/unit/test_operator_layers.py): ``spec/`` (the CRD's models), ``status/`` (pure status, tuning,
rollout; the read of a group), ``failover/`` (which members a dead pod leaves, and ending them), the
services (``tenancy``, ``zktls``, ``identity``, ``zkpool``, ``metrics``, ``clusterid``, ``diffbase``,
``kube``), ``controller/`` (one controller per ResourceGroup: its state, messages, pure plans, the
shared context), ``apply/`` (the I/O steps: spec -> znodes, rotation, deletion, the Secret poll), and
the shell: ``runtime`` (the context with the steps bound), ``statusloop``, ``podwatch``, ``handlers``,
``main`` / ``launch`` (CLI).
"""
