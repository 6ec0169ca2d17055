#!/usr/bin/env bash
# The whole test suite, starting what it needs: the README's test command; .ci/run calls it.
#
#   ./scripts/test.sh [PYTEST ARGS...]
#
# 1. installs redis-server, chromium, prometheus and Slurm 22.05 + munge + slurmdbd + MariaDB
#    (Debian/Ubuntu, when run as root) if they are missing,
# 2. checks Java 17+ and Maven (they fetch and run the real Kafka broker),
# 3. makes a virtualenv (.venv, or $GPUHINT_VENV) with gpuhint and its dev extras,
# 4. fetches Apache Kafka's jars from Maven Central (once; cached in .cache/kafka),
# 5. installs etcd-server and builds kube-apiserver + Kueue (scripts/k8s/build.sh; cached),
# 6. runs ruff, mypy and pytest. The tests start a real Kafka (KRaft), a real Redis and a
#    real Kubernetes API server with Kueue themselves, unless GPUHINT_TEST_KAFKA_BOOTSTRAP /
#    GPUHINT_TEST_REDIS_URL / GPUHINT_TEST_KUBECONFIG point at running ones.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

say() { printf '\n== %s\n' "$*"; }
die() { printf 'test.sh: %s\n' "$*" >&2; exit 1; }

say "system dependencies"
if ! command -v redis-server >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null
  else
    die "redis-server is missing: install it (sudo apt-get install -y redis-server)"
  fi
fi
# Debian's chromium: the headless-browser test of `gpuhint analyze`'s HTML report
if ! command -v chromium >/dev/null 2>&1 && [ -z "${GPUHINT_TEST_CHROMIUM:-}" ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  else
    die "chromium is missing: install it (sudo apt-get install -y chromium) or set GPUHINT_TEST_CHROMIUM"
  fi
fi
# Debian's prometheus: tests/metrics evaluates the Grafana dashboard's queries on a real one
if ! command -v prometheus >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    made_policy=0   # keep apt from starting a system-wide Prometheus
    if [ ! -e /usr/sbin/policy-rc.d ]; then
      printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d; chmod +x /usr/sbin/policy-rc.d; made_policy=1
    fi
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null
    [ "$made_policy" = 1 ] && rm -f /usr/sbin/policy-rc.d
  else
    die "prometheus is missing: install it (sudo apt-get install -y --no-install-recommends prometheus)"
  fi
fi
if ! "${PYTHON:-python3}" -c "import ensurepip, venv" >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null
  else
    die "python3 cannot make virtualenvs: install python3-venv (sudo apt-get install -y python3-venv)"
  fi
fi
# Slurm (slurmctld, slurmd, munge, slurmdbd over a private MariaDB) for tests/slurm
slurm_pkgs="slurm-wlm slurmctld slurmd slurm-client munge slurmdbd slurm-wlm-mysql-plugin mariadb-server-core mariadb-client-core"
if ! command -v slurmctld >/dev/null 2>&1 || ! command -v slurmdbd >/dev/null 2>&1 \
   || ! command -v mariadbd >/dev/null 2>&1 || ! command -v munged >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    made_policy=0   # keep apt from starting the system-wide munge/slurm services
    if [ ! -e /usr/sbin/policy-rc.d ]; then
      printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d; chmod +x /usr/sbin/policy-rc.d; made_policy=1
    fi
    apt-get update -qq
    # shellcheck disable=SC2086
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $slurm_pkgs >/dev/null
    [ "$made_policy" = 1 ] && rm -f /usr/sbin/policy-rc.d
  elif [ -z "${GPUHINT_TEST_SLURM:-}" ]; then
    die "Slurm is missing: sudo apt-get install -y $slurm_pkgs (or GPUHINT_TEST_SLURM=slurm.conf)"
  fi
fi
if ! command -v openssl >/dev/null 2>&1; then  # TLS test certificates (tests/faults)
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openssl >/dev/null
  else
    die "openssl is missing: install it (sudo apt-get install -y openssl)"
  fi
fi
command -v java >/dev/null 2>&1 || die "Java 17+ is missing (it runs the Kafka broker)"
command -v mvn >/dev/null 2>&1 || die "Maven is missing (it fetches Kafka from Maven Central)"
echo "redis: $(redis-server --version | cut -d' ' -f3)  java: $(java -version 2>&1 | head -1)"

say "python environment"
venv="${GPUHINT_VENV:-.venv}"
py="${PYTHON:-python3}"
if [ ! -x "$venv/bin/python" ]; then
  "$py" -m venv "$venv"
fi
"$venv/bin/python" -m pip install -q --disable-pip-version-check -e '.[dev]'
"$venv/bin/python" --version

say "Kafka jars"
bash scripts/kafka/fetch.sh

say "Kubernetes: etcd, kube-apiserver, Kueue (cold build ~25 min, cached after)"
# Debian's etcd-server when root; kube-apiserver and Kueue built with Go into
# ${XDG_CACHE_HOME:-$HOME/.cache}/gpuhint/k8s (skipped when GPUHINT_TEST_KUBECONFIG is set)
if [ -z "${GPUHINT_TEST_KUBECONFIG:-}" ]; then
  bash scripts/k8s/build.sh
fi

say "ruff"
"$venv/bin/ruff" check .
"$venv/bin/ruff" format --check .

say "mypy"
"$venv/bin/mypy"

say "pytest"
exec "$venv/bin/python" -m pytest "$@"
