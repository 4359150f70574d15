"""End-to-end tooling: the local control-plane build (``e2e/controlplane``), ``make demo`` and the kind path."""
