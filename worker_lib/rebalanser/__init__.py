"""Rebalanser: share named resources among worker processes through ZooKeeper."""
