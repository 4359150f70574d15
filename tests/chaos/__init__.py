"""Chaos harness: real worker processes, real ZooKeeper, injected faults, invariants checked from evidence."""
