# The sandbox ("pause") image: the static pause binary of the Kubernetes source, alone.
FROM scratch
COPY pause /pause
USER 65535:65535
ENTRYPOINT ["/pause"]
