#!/usr/bin/env bash
# A loopback-only Slurm cluster for tests and trials: N nodes x 8 fake GPUs, munge,
# slurmdbd over a private MariaDB (so sacct works), in a temporary directory. Installs
# Debian's Slurm packages when run as root. A thin wrapper of gpuhint/lab/local/slurm.py.
#
#   scripts/slurm/run-slurm.sh [--nodes 4] [--sched builtin|backfill]        until Ctrl-C
#   eval "$(scripts/slurm/run-slurm.sh --nodes 4 --detach --print-env)"      keep it running
#   scripts/slurm/run-slurm.sh --stop DIR                                    stop a detached one
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
py="${GPUHINT_VENV:-.venv}/bin/python"
[ -x "$py" ] || py=python3
exec "$py" -m gpuhint.lab.local.slurm "$@"
