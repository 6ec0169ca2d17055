#!/usr/bin/env bash
# Build and cache what the Kubernetes tests run: kube-apiserver and Kueue's controller, with
# Kueue's CRDs; install Debian's etcd-server when run as root. Idempotent: a cached build is
# reused (delete the cache directory to rebuild).
#
#   scripts/k8s/build.sh            # ~25 min cold on 2 cores, seconds when cached
#
# Cache layout (${XDG_CACHE_HOME:-$HOME/.cache}/gpuhint/k8s):
#   kas/bin/kube-apiserver   k8s.io/kubernetes v$KVER, built through a tiny module (below)
#   gobin/kueue              sigs.k8s.io/kueue/cmd/kueue v$KUEUE (go install)
#   kueue-crds/*.yaml        the CRDs of that Kueue release (config/components/crd/bases)
#   go/                      a Go toolchain from the Go module proxy, only if none >= 1.26 is on PATH
#
# k8s.io/kubernetes cannot be `go install`ed (its go.mod replaces the staging modules by
# ./staging): a module that requires it and replaces each staging module by its published
# v0.X.Y builds it. Go's own caches (~6 GB) stay in GOMODCACHE / GOCACHE.
set -euo pipefail
KVER=${GPUHINT_KUBE_VERSION:-1.37.2}
KUEUE=${GPUHINT_KUEUE_VERSION:-0.17.0}
GOVER=${GPUHINT_GO_TOOLCHAIN:-1.26.0}
C=${XDG_CACHE_HOME:-$HOME/.cache}/gpuhint/k8s
mkdir -p "$C"/kas/bin "$C"/gobin
say() { printf 'k8s/build.sh: %s\n' "$*" >&2; }
die() { say "$*"; exit 1; }

if ! command -v etcd >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    say "installing etcd-server (Debian)"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends etcd-server >/dev/null \
      || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends etcd-server >/dev/null; }
  else
    die "etcd is missing: sudo apt-get install -y etcd-server"
  fi
fi
missing=()
for pair in openssl:openssl curl:curl unshare:util-linux flock:util-linux; do
  command -v "${pair%%:*}" >/dev/null 2>&1 || missing+=("${pair#*:}")
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  else
    die "missing: ${missing[*]} (apt-get install -y ${missing[*]})"
  fi
fi

# one build at a time (parallel test sessions share the cache)
exec 9>"$C/.build.lock"
flock 9

have_crds() { compgen -G "$C/kueue-crds/*.yaml" >/dev/null; }
if [ -x "$C/kas/bin/kube-apiserver" ] && [ -x "$C/gobin/kueue" ] && have_crds; then
  say "cached: $C"
  exit 0
fi

# a Go toolchain >= 1.26: the one on PATH, else golang.org/toolchain from the Go module proxy
go_ok() { command -v go >/dev/null 2>&1 && go version | grep -Eq 'go1\.(2[6-9]|[3-9][0-9])'; }
if ! go_ok; then
  if [ ! -x "$C/go/bin/go" ]; then
    say "fetching Go $GOVER from the Go module proxy"
    arch=$(uname -m); case $arch in x86_64) arch=amd64;; aarch64) arch=arm64;; esac
    zip="$C/go-toolchain.zip"
    curl -fsSL -o "$zip" "${GOPROXY_URL:-https://proxy.golang.org}/golang.org/toolchain/@v/v0.0.1-go$GOVER.linux-$arch.zip"
    rm -rf "$C/go" "$C/go.tmp" && mkdir -p "$C/go.tmp"
    python3 - "$zip" "$C/go.tmp" <<'PY'
import os, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    for info in z.infolist():
        path = info.filename.split("/", 1)[1] if "/" in info.filename else ""
        if not path or info.is_dir():
            continue
        dest = os.path.join(sys.argv[2], path)
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        with z.open(info) as src, open(dest, "wb") as out:
            out.write(src.read())
        os.chmod(dest, (info.external_attr >> 16) & 0o777 or 0o644)
PY
    mv "$C/go.tmp" "$C/go" && rm -f "$zip"
  fi
  export PATH="$C/go/bin:$PATH" GOTOOLCHAIN=local
fi
go_ok || die "no Go >= 1.26 (have: $(go version 2>/dev/null || echo none))"
say "$(go version)"

if [ ! -x "$C/kas/bin/kube-apiserver" ]; then
  say "building kube-apiserver v$KVER (~15 min cold on 2 cores)"
  cd "$C/kas"
  go mod download -json "k8s.io/kubernetes@v$KVER" >/dev/null
  MOD=$(go env GOMODCACHE)/cache/download/k8s.io/kubernetes/@v/v$KVER.mod
  { echo 'module gpuhint/kas'; echo; echo 'go 1.26.0'; echo; echo "require k8s.io/kubernetes v$KVER"; echo; echo 'replace (';
    grep -E '=> ./staging' "$MOD" | awk -v v="v0.${KVER#1.}" '{print "\t"$1" => "$1" "v}'; echo ')'; } > go.mod
  printf '//go:build tools\n\npackage tools\n\nimport _ "k8s.io/kubernetes/cmd/kube-apiserver/app"\n' > tools.go
  printf 'package main\n\nfunc main() {}\n' > main.go
  go mod tidy >/dev/null 2>&1 || go mod tidy
  go build -ldflags "-X k8s.io/component-base/version.gitVersion=v$KVER -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=${KVER#1.}" \
    -o bin/kube-apiserver.tmp k8s.io/kubernetes/cmd/kube-apiserver
  mv bin/kube-apiserver.tmp bin/kube-apiserver
fi

if [ ! -x "$C/gobin/kueue" ]; then
  say "building kueue v$KUEUE (~8 min cold on 2 cores)"
  (cd "$C/kas" && GOBIN="$C/gobin.tmp" go install "sigs.k8s.io/kueue/cmd/kueue@v$KUEUE")
  mv "$C/gobin.tmp/kueue" "$C/gobin/kueue" && rmdir "$C/gobin.tmp"
fi

if ! have_crds; then
  (cd "$C/kas" && go mod download "sigs.k8s.io/kueue@v$KUEUE")
  KDIR=$(go env GOMODCACHE)/sigs.k8s.io/kueue@v$KUEUE
  rm -rf "$C/kueue-crds.tmp" && mkdir -p "$C/kueue-crds.tmp"
  cp "$KDIR"/config/components/crd/bases/*.yaml "$C/kueue-crds.tmp/"
  rm -rf "$C/kueue-crds" && mv "$C/kueue-crds.tmp" "$C/kueue-crds"
fi
say "built: $C"
