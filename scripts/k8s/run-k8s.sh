#!/usr/bin/env bash
# A real Kubernetes API server with Kueue on loopback, for trying gpuhint's Kueue applier:
# builds what is missing (scripts/k8s/build.sh), starts etcd + kube-apiserver + Kueue on
# free ports in a temporary directory, prints `export KUBECONFIG=...`, stops all on Ctrl-C.
#
#   scripts/k8s/run-k8s.sh [--no-kueue] [--workdir DIR]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
bash scripts/k8s/build.sh
py=${PYTHON:-.venv/bin/python}
[ -x "$py" ] || py=python3
exec "$py" -m gpuhint.lab.local.k8s "$@"
