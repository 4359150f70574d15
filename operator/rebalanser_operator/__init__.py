"""The Rebalanser operator: reconciles ResourceGroup custom resources into ZooKeeper groups.

Layout: ``models`` (CRD spec/status, the source of truth), ``crdgen`` (CRD YAML), ``reconcile``
(plain functions on a KazooClient), ``zkpool`` (one shared connection per connect string),
``statusview`` / ``tuning`` (pure status and interval policy), ``statusloop`` (the
per-group live status mirror), ``handlers`` (thin kopf handlers), ``main`` (CLI).
"""
