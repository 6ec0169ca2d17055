#!/usr/bin/env bash
# Run the benchmark of every section of docs/benchmarks.md, with the command that section
# cites (numbers go to stdout; the doc records them with the machine and date). Needs
# Java + Maven (Kafka) and redis-server for the pipeline and failover benchmarks, and
# ../shared/traces for the trace-based ones. A section whose prerequisite is missing
# (traces; Slurm not installed; kube-apiserver and Kueue not built by scripts/k8s/build.sh)
# says "SKIPPED" and why. Every section runs even if one fails; the script then names the
# failed ones and exits 1. Long: the Kueue section alone takes minutes.
# Not run here (run them on their own, see their --help): bench_handler, bench_state and
# bench_ces_jobs (no section), the eval_* scripts but eval_qssf, chaos.py, exactly_once.py.
#   bash bench/run_all.sh
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
py="${PYTHON:-python3}"
traces=../shared/traces
failed=()
run() {  # run TITLE COMMAND...: one section; a failure is named, and the rest still run
  local title=$1; shift
  echo; echo "## $title"
  if ! "$@"; then
    echo "FAILED: $title ($*)" >&2
    failed+=("$title")
  fi
}
skip() { echo; echo "## $1"; echo "SKIPPED: $2" >&2; }
kcache="${XDG_CACHE_HOME:-$HOME/.cache}/gpuhint/k8s"
echo "# $(date -u +%F) $(uname -m) $(nproc) cores $($py --version)"
run "embedded core" $py bench/bench_core.py
run "duration models" $py bench/bench_models.py --repeat 5
run "job rosters" $py bench/bench_roster.py
if [ -d "$traces" ]; then
  run "simulator" $py bench/bench_simulator.py "$traces/philly/philly_sampled_jobs.json"
  run "CES" $py bench/bench_ces.py --series "$traces/ces/philly_node_sequence.csv.gz"
  run "QSSF closed-loop evaluation" $py bench/eval_qssf.py --traces "$traces"
else
  skip "simulator" "no $traces"
  run "CES" $py bench/bench_ces.py
  skip "QSSF closed-loop evaluation" "no $traces"
fi
run "CES node-status path" $py bench/bench_ces.py --tracker --json
run "node agent" $py bench/bench_agent.py --seconds 60
run "metrics" $py bench/bench_metrics.py --runs 40
run "trace analysis" $py bench/bench_analyze.py
run "pipeline (Kafka + worker + Redis)" $py bench/bench_pipeline.py
run "failover" $py bench/bench_failover.py --json
if command -v slurmctld >/dev/null || [ -x /usr/sbin/slurmctld ]; then
  run "Slurm apply-priorities" $py bench/bench_slurm_apply.py --jobs 10000
else
  skip "Slurm apply-priorities" "Slurm is not installed (slurmctld)"
fi
if [ -x "$kcache/kas/bin/kube-apiserver" ] && [ -x "$kcache/gobin/kueue" ]; then
  run "Kueue applier" $py bench/bench_kueue_apply.py --n 10000 --json
else
  skip "Kueue applier" "kube-apiserver/Kueue not built under $kcache (scripts/k8s/build.sh)"
fi
if [ ${#failed[@]} -gt 0 ]; then
  echo >&2; echo "run_all: ${#failed[@]} failed: ${failed[*]}" >&2
  exit 1
fi
echo; echo "run_all: every section ran"
