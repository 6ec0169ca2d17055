#!/usr/bin/env bash
# One real NVML sample as JSON lines (no Kafka), then one agent tick in --dry-run.
# Run on a GPU host from the repository root:  bash scripts/gpu_smoke.sh
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m agents.smoke
python3 -m gpuhint agent --nvml real --once --dry-run --node "$(hostname -s)" >/dev/null
echo "gpu_smoke: ok" >&2
