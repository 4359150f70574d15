"""A ResourceGroup's status: the pipelined read of its group (``groupread``), the pure status
(``view``), the pure interval policy (``tuning``), workload rollouts (``rollout``), and the loop that
mirrors ZooKeeper into ``.status`` as its controller's refresh step (``loop``)."""
