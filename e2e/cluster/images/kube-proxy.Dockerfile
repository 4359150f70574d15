# kube-proxy as kubeadm's DaemonSet runs it (/usr/local/bin/kube-proxy), with iptables and conntrack.
# select-iptables picks the iptables backend (legacy or nft) that already holds the node's rules.
ARG BASE=rebalanser/bookworm:local
FROM ${BASE}
# bookworm is a frozen release: its package versions are fixed by the suite.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends iptables conntrack nftables \
    && rm -rf /var/lib/apt/lists/*
COPY kube-proxy /usr/local/bin/kube-proxy.bin
COPY select-iptables /usr/local/bin/kube-proxy
