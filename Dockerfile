# gpuhint: one image for the worker, the node agent and the CLI tools.
FROM python:3.11-slim

ENV PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /app
COPY pyproject.toml README.md ./
COPY gpuhint ./gpuhint
COPY models ./models
COPY streams ./streams
COPY agents ./agents
# uid/gid 10001: the runAsUser / runAsGroup of the Kubernetes manifests (deploy/k8s/),
# so files the image owns are the pods' own; numeric, so runAsNonRoot can check it
RUN pip install . && groupadd --system --gid 10001 gpuhint \
    && useradd --system --uid 10001 --gid 10001 --home /var/lib/gpuhint gpuhint \
    && mkdir -p /var/lib/gpuhint/state /var/lib/gpuhint/spill \
    && chown -R gpuhint /var/lib/gpuhint
USER 10001:10001
WORKDIR /var/lib/gpuhint
ENV GPUHINT_STATE_DIR=/var/lib/gpuhint/state
ENTRYPOINT ["gpuhint"]
CMD ["--help"]
