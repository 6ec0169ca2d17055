#!/usr/bin/env bash
# Run every benchmark in one go (numbers go to stdout; docs/benchmarks.md records them
# with the machine and date). Needs Java + Maven (Kafka) and redis-server for the
# pipeline benchmark, and ../shared/traces for the trace-based ones when present.
#   bash bench/run_all.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
py="${PYTHON:-python3}"
traces=../shared/traces
echo "# $(date -u +%F) $(uname -m) $(nproc) cores $($py --version)"
echo; echo "## embedded core";   $py bench/bench_core.py
echo; echo "## duration models"; $py bench/bench_models.py --repeat 5
if [ -d "$traces" ]; then
  echo; echo "## simulator"; $py bench/bench_simulator.py "$traces/philly/philly_sampled_jobs.json"
  echo; echo "## CES";       $py bench/bench_ces.py --series "$traces/ces/philly_node_sequence.csv.gz"
else
  echo; echo "## CES";       $py bench/bench_ces.py
fi
if [ -f bench/bench_agent.py ]; then echo; echo "## node agent"; $py bench/bench_agent.py; fi
echo; echo "## pipeline (Kafka + worker + Redis)"; $py bench/bench_pipeline.py
