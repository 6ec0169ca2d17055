"""Start a real Kubernetes API server with Kueue on loopback: etcd + kube-apiserver + Kueue.

Used by the Kueue tests, the Kueue benchmark and ``scripts/k8s/run-k8s.sh``. No Docker,
no kubelet: Debian's ``etcd`` and a ``kube-apiserver`` built from the Go module proxy
(``scripts/k8s/build.sh``, cached under ``${XDG_CACHE_HOME:-~/.cache}/gpuhint/k8s``) run
in a temporary directory on free ports; Kueue's CRDs are created through the API (the
official ``kubernetes`` client, no kubectl), then Kueue's controller runs out of cluster
with an admin token. Kueue admits and unsuspends Jobs; no Pods ever run.

Kueue reads its metrics certificates from the fixed path ``/etc/kueue/metrics/certs``
when its internal certificate management is off: it runs in a private mount namespace
where ``/etc`` is an overlay holding a self-signed pair, so the host's ``/etc`` is never
written.

    python -m gpuhint.lab.local.k8s            # prints KUBECONFIG=..., runs until Ctrl-C
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import secrets
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Self

from gpuhint.lab.local.kueue_env import KUEUE_API, KueueEnv, wait_for
from gpuhint.lab.local.services import ServiceError, free_port

__all__ = [
    "KUEUE_API",
    "KueueEnv",
    "LocalKubernetes",
    "kubernetes_service",
    "wait_for",
]

REPO = Path(__file__).resolve().parents[3]
BUILD_SCRIPT = REPO / "scripts" / "k8s" / "build.sh"
KUEUE_VERSION = "0.17.0"
ENV_KUBECONFIG = "GPUHINT_TEST_KUBECONFIG"


def cache_dir() -> Path:
    """``${XDG_CACHE_HOME:-$HOME/.cache}/gpuhint/k8s``: the binaries and CRDs build.sh made."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "gpuhint" / "k8s"


def _crd_dir() -> Path | None:
    cached = cache_dir() / "kueue-crds"
    if any(cached.glob("*.yaml")):
        return cached
    go = shutil.which("go")
    if go:  # the module build.sh downloaded, if the copy is missing
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            mod = subprocess.run(
                [go, "env", "GOMODCACHE"], capture_output=True, text=True, timeout=30
            ).stdout.strip()
            d = Path(mod) / f"sigs.k8s.io/kueue@v{KUEUE_VERSION}/config/components/crd/bases"
            if any(d.glob("*.yaml")):
                return d
    return None


def binaries() -> tuple[Path, Path]:
    c = cache_dir()
    return c / "kas" / "bin" / "kube-apiserver", c / "gobin" / "kueue"


def ensure_built(timeout_s: float = 3600.0) -> None:
    """Run ``scripts/k8s/build.sh`` unless etcd, the binaries and the CRDs are all there."""
    kas, kueue = binaries()
    if kas.is_file() and kueue.is_file() and _crd_dir() and shutil.which("etcd"):
        return
    print(f"[k8s] building kube-apiserver and Kueue into {cache_dir()} (cold: ~25 min)")
    try:
        proc = subprocess.run(
            ["bash", str(BUILD_SCRIPT)],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise ServiceError(f"{BUILD_SCRIPT} ran over {timeout_s:.0f} s") from None
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
        raise ServiceError(f"{BUILD_SCRIPT} failed (exit {proc.returncode}):\n{tail}")


def _openssl(*args: str) -> None:
    if shutil.which("openssl") is None:
        raise ServiceError("openssl is missing (apt-get install -y openssl)")
    subprocess.run(["openssl", *args], check=True, capture_output=True)


class LocalKubernetes:
    """etcd + kube-apiserver + Kueue on free loopback ports in a temporary directory.

    ``kubeconfig`` is a file with an admin bearer token (``system:masters``) and the
    server's self-signed certificate not verified (loopback only).
    """

    def __init__(self, workdir: Path | None = None, kueue: bool = True) -> None:
        self._tmp = None if workdir else tempfile.mkdtemp(prefix="gpuhint-k8s-")
        self.workdir = Path(workdir or self._tmp or ".")
        self.with_kueue = kueue
        self.api_port = free_port()
        self.token = secrets.token_hex(16)
        self.kubeconfig = self.workdir / "kubeconfig"
        self._procs: list[tuple[str, subprocess.Popen[bytes]]] = []

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.api_port}"

    # -- lifecycle ---------------------------------------------------------------------
    def start(self) -> Self:
        ensure_built()
        kas, kueue_bin = binaries()
        crds = _crd_dir()
        etcd = shutil.which("etcd")
        if etcd is None or crds is None:
            raise ServiceError("etcd or Kueue's CRDs are missing: run scripts/k8s/build.sh")
        w = self.workdir
        for d in ("pki", "etcd", "certs", "kueue-certs", "overlay/upper", "overlay/work"):
            (w / d).mkdir(parents=True, exist_ok=True)
        self._write_credentials()
        try:
            t0 = time.monotonic()
            self._start_etcd(etcd)
            self._start_apiserver(kas)
            self._wait_api(120.0)
            self._trust_serving_cert()
            self._create_crds(crds)
            t1 = time.monotonic()
            if self.with_kueue:
                self._start_kueue(kueue_bin)
            self.startup = (t1 - t0, time.monotonic() - t1)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        for _name, proc in reversed(self._procs):
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
        for _name, proc in reversed(self._procs):
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(5)
        self._procs.clear()
        if self._tmp:
            shutil.rmtree(self._tmp, ignore_errors=True)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def log_tail(self, name: str, n: int = 20) -> str:
        try:
            lines = (self.workdir / f"{name}.log").read_text(errors="replace").splitlines()
        except OSError:
            return "(no log)"
        return "\n".join(lines[-n:])

    # -- steps -------------------------------------------------------------------------
    def _spawn(self, name: str, argv: list[str]) -> subprocess.Popen[bytes]:
        log = open(self.workdir / f"{name}.log", "wb")  # noqa: SIM115 - lives with the process
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            cwd=self.workdir,
        )
        self._procs.append((name, proc))
        return proc

    def _check_alive(self) -> None:
        for name, proc in self._procs:
            if proc.poll() is not None:
                raise ServiceError(
                    f"{name} exited with code {proc.returncode}:\n{self.log_tail(name)}"
                )

    def _write_credentials(self) -> None:
        pki = self.workdir / "pki"
        _openssl("genrsa", "-out", str(pki / "sa.key"), "2048")
        _openssl("rsa", "-in", str(pki / "sa.key"), "-pubout", "-out", str(pki / "sa.pub"))
        (pki / "tokens.csv").write_text(f"{self.token},admin,admin,system:masters\n")
        kc = self.workdir / "kueue-certs"
        _openssl(
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "30",
            "-keyout", str(kc / "tls.key"), "-out", str(kc / "tls.crt"),
            "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
        )  # fmt: skip
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {"name": "gpuhint-test", "cluster": {"server": self.server,
                                                     "insecure-skip-tls-verify": True}}
            ],
            "users": [{"name": "admin", "user": {"token": self.token}}],
            "contexts": [
                {"name": "gpuhint-test", "context": {"cluster": "gpuhint-test", "user": "admin"}}
            ],
            "current-context": "gpuhint-test",
        }  # fmt: skip
        self.kubeconfig.write_text(json.dumps(config, indent=1))  # JSON is YAML
        self.kubeconfig.chmod(0o600)

    def _start_etcd(self, etcd: str) -> None:
        client, peer, metrics = free_port(), free_port(), free_port()
        self.etcd_url = f"http://127.0.0.1:{client}"
        self._spawn(
            "etcd",
            [
                etcd, "--name", "gpuhint", "--data-dir", str(self.workdir / "etcd" / "data"),
                "--listen-client-urls", self.etcd_url, "--advertise-client-urls", self.etcd_url,
                "--listen-peer-urls", f"http://127.0.0.1:{peer}",
                "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
                "--initial-cluster", f"gpuhint=http://127.0.0.1:{peer}",
                "--listen-metrics-urls", f"http://127.0.0.1:{metrics}",
            ],
        )  # fmt: skip

    def _start_apiserver(self, kas: Path) -> None:
        pki = self.workdir / "pki"
        # --endpoint-reconciler-type=none: it refuses a loopback advertise address otherwise;
        # ServiceAccount admission off: no controller-manager makes 'default' accounts.
        self._spawn(
            "kube-apiserver",
            [
                str(kas), f"--etcd-servers={self.etcd_url}",
                "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
                "--endpoint-reconciler-type=none", f"--secure-port={self.api_port}",
                f"--cert-dir={self.workdir / 'certs'}", f"--token-auth-file={pki / 'tokens.csv'}",
                "--authorization-mode=RBAC",
                "--service-account-issuer=https://kubernetes.default.svc",
                f"--service-account-key-file={pki / 'sa.pub'}",
                f"--service-account-signing-key-file={pki / 'sa.key'}",
                "--service-cluster-ip-range=10.96.0.0/24",
                "--disable-admission-plugins=ServiceAccount",
            ],
        )  # fmt: skip

    def _get(self, path: str) -> tuple[int, str]:
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        req = urllib.request.Request(
            self.server + path, headers={"Authorization": f"Bearer {self.token}"}
        )
        try:
            with urllib.request.urlopen(req, timeout=5, context=ctx) as resp:
                return int(resp.status), resp.read().decode()
        except urllib.error.HTTPError as exc:
            return int(exc.code), ""
        except OSError:
            return 0, ""

    def _wait_api(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self._check_alive()
            if self._get("/readyz") == (200, "ok"):
                return
            time.sleep(0.25)
        raise ServiceError(
            f"kube-apiserver not ready after {timeout_s:.0f} s:\n{self.log_tail('kube-apiserver')}"
        )

    def _trust_serving_cert(self) -> None:
        """Verify the server by its self-signed certificate (it names 127.0.0.1)."""
        crt = self.workdir / "certs" / "apiserver.crt"
        if not crt.is_file():
            return
        config = json.loads(self.kubeconfig.read_text())
        config["clusters"][0]["cluster"] = {
            "server": self.server,
            "certificate-authority": str(crt),
        }
        self.kubeconfig.write_text(json.dumps(config, indent=1))

    def _create_crds(self, crd_dir: Path) -> None:
        import yaml
        from kubernetes import client, config

        api = client.ApiextensionsV1Api(config.new_client_from_config(str(self.kubeconfig)))
        names = []
        for path in sorted(crd_dir.glob("*.yaml")):
            for doc in yaml.safe_load_all(path.read_text()):
                if doc and doc.get("kind") == "CustomResourceDefinition":
                    api.create_custom_resource_definition(doc)
                    names.append(doc["metadata"]["name"])
        deadline = time.monotonic() + 60
        waiting = set(names)
        while waiting and time.monotonic() < deadline:
            for name in list(waiting):
                crd = api.read_custom_resource_definition(name)
                conds = (crd.status and crd.status.conditions) or []
                if any(c.type == "Established" and c.status == "True" for c in conds):
                    waiting.discard(name)
            time.sleep(0.2)
        if waiting:  # Kueue's controller exits ("no matches for kind") without them
            raise ServiceError(f"CRDs not Established after 60 s: {sorted(waiting)}")
        core = client.CoreV1Api(api.api_client)
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name="kueue-system")))

    def _start_kueue(self, kueue: Path) -> None:
        w = self.workdir
        health, metrics, webhook = free_port(), free_port(), free_port()
        self.kueue_health = f"http://127.0.0.1:{health}"
        (w / "kueue-config.yaml").write_text(
            "apiVersion: config.kueue.x-k8s.io/v1beta2\n"
            "kind: Configuration\n"
            "namespace: kueue-system\n"
            f'health: {{healthProbeBindAddress: "127.0.0.1:{health}"}}\n'
            f'metrics: {{bindAddress: "127.0.0.1:{metrics}"}}\n'
            f'webhook: {{host: 127.0.0.1, port: {webhook}, certDir: "{w / "kueue-certs"}"}}\n'
            "leaderElection: {leaderElect: false}\n"
            "internalCertManagement: {enable: false}\n"
            "clientConnection: {qps: 200, burst: 400}\n"
            'integrations: {frameworks: ["batch/job"]}\n'
        )
        script = w / "run-kueue.sh"
        script.write_text(
            "#!/bin/sh\nset -e\n"
            f"mount -t overlay overlay -o lowerdir=/etc,upperdir={w}/overlay/upper,"
            f"workdir={w}/overlay/work /etc\n"
            "mkdir -p /etc/kueue/metrics/certs\n"
            f"cp {w}/kueue-certs/tls.crt {w}/kueue-certs/tls.key /etc/kueue/metrics/certs/\n"
            f"exec {kueue} --config={w}/kueue-config.yaml --kubeconfig={self.kubeconfig} "
            "--feature-gates=VisibilityOnDemand=false\n"
        )
        script.chmod(0o755)
        unshare = shutil.which("unshare")
        if unshare is None:
            raise ServiceError("unshare is missing (apt-get install -y util-linux)")
        # root: a private mount namespace; otherwise a user namespace that maps us to root
        userns = [] if os.geteuid() == 0 else ["-r"]
        self._spawn("kueue", [unshare, *userns, "-m", "--propagation", "private", str(script)])
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            self._check_alive()
            with (
                contextlib.suppress(OSError),
                urllib.request.urlopen(self.kueue_health + "/readyz", timeout=2) as r,
            ):
                if r.status == 200:
                    return
            time.sleep(0.25)
        raise ServiceError(f"Kueue not ready after 120 s:\n{self.log_tail('kueue')}")


@contextlib.contextmanager
def kubernetes_service() -> Iterator[tuple[str, str]]:
    """``(kubeconfig path, how it was found)``: ``$GPUHINT_TEST_KUBECONFIG`` or a local one."""
    existing = os.environ.get(ENV_KUBECONFIG)
    if existing:
        if not Path(existing).is_file():
            raise ServiceError(f"{ENV_KUBECONFIG}={existing}: no such file")
        yield existing, f"existing cluster from {ENV_KUBECONFIG}={existing}"
        return
    with LocalKubernetes() as k8s:
        api_s, kueue_s = k8s.startup
        yield (
            str(k8s.kubeconfig),
            f"local etcd + kube-apiserver {k8s.server} ({api_s:.1f} s) + Kueue ({kueue_s:.1f} s)",
        )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m gpuhint.lab.local.k8s",
        description="Run etcd + kube-apiserver + Kueue on loopback until interrupted.",
    )
    p.add_argument("--no-kueue", action="store_true", help="API server and CRDs only")
    p.add_argument("--workdir", type=Path, help="keep state here (default: a temporary dir)")
    args = p.parse_args(argv)
    stop: list[Any] = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    try:
        with LocalKubernetes(args.workdir, kueue=not args.no_kueue) as k8s:
            print(f"export KUBECONFIG={k8s.kubeconfig}", flush=True)
            print(f"api server {k8s.server}; logs in {k8s.workdir}", file=sys.stderr, flush=True)
            while not stop:
                time.sleep(0.5)
                k8s._check_alive()
    except ServiceError as exc:
        print(f"k8s: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
