# The cluster DNS server, as kubeadm's CoreDNS Deployment runs it (arguments only, no command).
ARG BASE=rebalanser/bookworm:local
FROM ${BASE}
COPY coredns /coredns
ENTRYPOINT ["/coredns"]
