"""Applying a ResourceGroup's spec: its znodes (``reconcile``), the controller's I/O steps for a spec,
credentials rotation and deletion (``actions``), the referenced Secrets' poll (``secretpoll``), and
the release of a terminating namespace's groups (``farewell``)."""
