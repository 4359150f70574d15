# A control-plane component (kube-apiserver, kube-controller-manager, kube-scheduler, etcd) as
# kubeadm's static pods run it: the binary on PATH in /usr/local/bin. BINARY names it; the build
# context holds it.
ARG BASE=rebalanser/bookworm:local
FROM ${BASE}
ARG BINARY
COPY ${BINARY} /usr/local/bin/
