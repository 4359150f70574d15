"""The local lab that `make demo`, the benchmarks and the tests share: real ZooKeeper servers
(:mod:`e2e.lab.zk`), the local control plane (:mod:`e2e.lab.cluster`), kubectl/helm on the real
cluster (:mod:`e2e.lab.kubectl`, :mod:`e2e.lab.podcluster`, :mod:`e2e.lab.podtools`). Product code
(`make demo`) imports from here, never from ``tests/``; ``tests/support`` re-exports these modules."""
