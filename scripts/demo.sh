#!/usr/bin/env bash
# The README's main command: install gpuhint in a virtualenv and run the embedded demo
# (a real Helios trace excerpt through the hint core; no Kafka, no Redis needed).
#   ./scripts/demo.sh [gpuhint demo options...]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
venv="${GPUHINT_VENV:-.venv}"
if [ ! -x "$venv/bin/python" ]; then
  "${PYTHON:-python3}" -m venv "$venv"
fi
"$venv/bin/python" -m pip install -q --disable-pip-version-check -e .
exec "$venv/bin/gpuhint" demo "$@"
