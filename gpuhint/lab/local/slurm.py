"""Start a real, loopback-only Slurm cluster (Debian's Slurm 22.05) for tests and benchmarks.

``LocalSlurm`` runs, in a temporary directory: munged (private socket and key), a private
MariaDB + slurmdbd (so ``sacct`` works), slurmctld and one slurmd per node (``n1..nN``,
each on its own 127.0.0.1 port), each node with 8 fake GPUs (``gres.conf`` ``File=``
entries that are symlinks to /dev/null). No cgroups are needed. When run as root it
installs the Debian packages it lacks. Everything is stopped by PID on :meth:`stop`.

    python -m gpuhint.lab.local.slurm --nodes 4 --sched builtin      # until Ctrl-C
    eval "$(python -m gpuhint.lab.local.slurm --nodes 4 --print-env --detach)"   # keeps running

Then ``sbatch``/``squeue``/``scontrol`` work with ``SLURM_CONF`` from :attr:`LocalSlurm.env`.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Self

from gpuhint.lab.local.process import ServiceError, free_port, free_ports
from gpuhint.lab.local.slurm_conf import SBIN, gres_conf, power_scripts, slurm_conf, slurmdbd_conf

PACKAGES = ("slurm-wlm", "slurmctld", "slurmd", "slurm-client", "munge")
DB_PACKAGES = ("slurmdbd", "slurm-wlm-mysql-plugin", "mariadb-server-core", "mariadb-client-core")


def ensure_packages(accounting: bool = True) -> None:
    """Install Debian's Slurm, munge (and slurmdbd + MariaDB) when missing and we are root."""
    need = ["slurmctld", "slurmd", "munged", "sbatch"]
    pkgs = list(PACKAGES)
    if accounting:
        need += ["slurmdbd", "mariadbd"]
        pkgs += DB_PACKAGES
    env = {**os.environ, "PATH": SBIN, "DEBIAN_FRONTEND": "noninteractive"}
    if all(shutil.which(x, path=SBIN) for x in need):
        return
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise ServiceError(
            "Slurm is not installed: apt-get install -y " + " ".join(pkgs) + " (as root), "
            "or set GPUHINT_TEST_SLURM to the slurm.conf of a running test cluster"
        )
    policy = Path("/usr/sbin/policy-rc.d")
    made = False
    if not policy.exists():  # keep apt from starting the system-wide munge/slurm services
        policy.write_text("#!/bin/sh\nexit 101\n")
        policy.chmod(0o755)
        made = True
    try:
        if subprocess.run(["apt-cache", "show", *pkgs], capture_output=True, env=env).returncode:
            subprocess.run(["apt-get", "update", "-qq"], capture_output=True, env=env)
        proc = subprocess.run(
            ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *pkgs],
            capture_output=True,
            text=True,
            env=env,
        )
        if proc.returncode:
            raise ServiceError(f"apt-get install {' '.join(pkgs)} failed:\n{proc.stderr[-2000:]}")
    finally:
        if made:
            policy.unlink(missing_ok=True)


class LocalSlurm:
    """A Slurm cluster of ``nodes`` x ``gpus`` fake GPUs on loopback, in its own directory."""

    def __init__(
        self,
        nodes: int = 4,
        *,
        gpus: int = 8,
        cpus: int = 8,
        sched: str = "builtin",
        accounting: bool = True,
        suspend_time: int = 3600,
        boot_delay_s: float = 0.0,
        workdir: Path | None = None,
        extra_conf: Sequence[str] = (),
        cluster_name: str = "test",
    ) -> None:
        if nodes < 1:
            raise ValueError("nodes must be >= 1")
        if sched not in ("builtin", "backfill"):
            raise ValueError("sched must be builtin or backfill")
        self.nodes = nodes
        self.gpus = gpus
        self.cpus = cpus
        self.sched = sched
        self.accounting = accounting
        self.suspend_time = suspend_time
        self.boot_delay_s = boot_delay_s
        self.extra_conf = list(extra_conf)
        self.cluster_name = cluster_name
        self._tmp = None if workdir else tempfile.mkdtemp(prefix="gpuhint-slurm-")
        self.dir = Path(workdir or self._tmp or ".").resolve()
        self.conf = self.dir / "etc" / "slurm.conf"
        self.ctld_port = 0
        self.node_port = 0
        self.dbd_port = 0
        self.db_port = 0
        self._mariadb: subprocess.Popen[bytes] | None = None

    # ------------------------------------------------------------------ helpers
    @property
    def env(self) -> dict[str, str]:
        """Environment for Slurm commands against this cluster."""
        path = os.environ.get("PATH", "")
        return {**os.environ, "SLURM_CONF": str(self.conf), "PATH": f"{path}:{SBIN}"}

    @property
    def node_names(self) -> list[str]:
        return [f"n{i}" for i in range(1, self.nodes + 1)]

    def run(self, *argv: str, check: bool = True, timeout: float = 60) -> str:
        """Run a Slurm command against this cluster; its stdout."""
        proc = subprocess.run(
            list(argv), capture_output=True, text=True, env=self.env, timeout=timeout
        )
        if check and proc.returncode != 0:
            raise ServiceError(f"{' '.join(argv)} exited {proc.returncode}: {proc.stderr.strip()}")
        return proc.stdout

    def _daemon(self, *argv: str) -> None:
        proc = subprocess.run(list(argv), capture_output=True, text=True, env=self.env)
        if proc.returncode != 0:
            raise ServiceError(f"{argv[0]} failed ({proc.returncode}): {proc.stderr.strip()}")

    def log_tail(self, name: str = "slurmctld.log", n: int = 20) -> str:
        try:
            lines = (self.dir / "log" / name).read_text(errors="replace").splitlines()
        except OSError:
            return "(no log)"
        return "\n".join(ln for ln in lines[-n:])

    # ------------------------------------------------------------------ start
    def start(self, timeout: float = 90.0) -> Self:
        ensure_packages(self.accounting)
        d = self.dir
        for sub in ("etc", "state", "log", "run", "bin", "dev", "munge", "mysql"):
            (d / sub).mkdir(parents=True, exist_ok=True)
        d.chmod(0o755)  # munged: every directory above its socket must be o+x
        (d / "munge").chmod(0o755)
        for n in self.node_names:
            (d / "spool" / n).mkdir(parents=True, exist_ok=True)
        for i in range(self.gpus):
            link = d / "dev" / f"fakegpu{i}"
            if not link.is_symlink():
                link.symlink_to("/dev/null")
        self.ctld_port = free_port()
        self.node_port = free_ports(self.nodes)
        self.dbd_port = free_port()
        self.db_port = free_port()
        try:
            self._start_munge()
            self._write_conf()
            if self.accounting:
                self._start_accounting(timeout)
            self._daemon("slurmctld", "-f", str(self.conf), "-c")
            for n in self.node_names:
                self._daemon("slurmd", "-f", str(self.conf), "-N", n)
            self.wait_idle(timeout)
        except ServiceError as exc:
            tail = self.log_tail()
            self.stop()
            raise ServiceError(f"{exc}\nslurmctld.log:\n{tail}") from None
        except BaseException:
            self.stop()
            raise
        return self

    def wait_idle(self, timeout: float = 60.0) -> None:
        """Wait until every node is idle (registered, no job)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            out = self.run("sinfo", "-h", "-N", "-t", "idle", "-o", "%N", check=False)
            if len(set(out.split())) >= self.nodes:
                return
            time.sleep(0.2)
        sinfo = self.run("sinfo", "-N", check=False)
        raise ServiceError(f"Slurm nodes did not become idle in {timeout:.0f} s:\n{sinfo}")

    def _start_munge(self) -> None:
        m = self.dir / "munge"
        key = m / "munge.key"
        if not key.exists():
            key.write_bytes(os.urandom(1024))
            key.chmod(0o400)
        self._daemon(
            "munged",
            f"--socket={m / 'munge.socket'}",
            f"--key-file={key}",
            f"--pid-file={m / 'munged.pid'}",
            f"--log-file={m / 'munged.log'}",
            f"--seed-file={m / 'munged.seed'}",
        )

    def _write_conf(self) -> None:
        d = self.dir
        self.conf.write_text(slurm_conf(self))
        (d / "etc" / "gres.conf").write_text(gres_conf(self))
        for name, text in power_scripts(self).items():
            (d / "bin" / name).write_text(text)
            (d / "bin" / name).chmod(0o755)

    def _start_accounting(self, timeout: float) -> None:
        d = self.dir
        data = d / "mysql" / "data"
        if not data.exists():
            with open(d / "log" / "mariadb-install.log", "wb") as log:
                rc = subprocess.run(
                    [
                        "mariadb-install-db",
                        "--no-defaults",
                        "--user=root",
                        f"--datadir={data}",
                        "--auth-root-authentication-method=normal",
                        "--skip-test-db",
                    ],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=self.env,
                ).returncode
            if rc:
                raise ServiceError(f"mariadb-install-db failed: see {d / 'log'}")
        sock = d / "mysql" / "mysql.sock"
        self._mariadb = subprocess.Popen(
            [
                "mariadbd",
                "--no-defaults",
                "--user=root",
                f"--datadir={data}",
                f"--socket={sock}",
                "--bind-address=127.0.0.1",
                f"--port={self.db_port}",
                f"--pid-file={d / 'run' / 'mariadbd.pid'}",
                f"--log-error={d / 'log' / 'mariadbd.log'}",
                "--skip-name-resolve",
                "--innodb-buffer-pool-size=64M",
                "--innodb-flush-log-at-trx-commit=0",
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=self.env,
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout
        while not sock.exists():
            if self._mariadb.poll() is not None or time.monotonic() > deadline:
                raise ServiceError(f"mariadbd did not start: {self.log_tail('mariadbd.log')}")
            time.sleep(0.1)
        dbd = d / "etc" / "slurmdbd.conf"
        dbd.write_text(slurmdbd_conf(self))
        dbd.chmod(0o600)
        self._daemon("slurmdbd")
        while not self._dbd_answers():
            if time.monotonic() > deadline:
                raise ServiceError(f"slurmdbd did not answer: {self.log_tail('slurmdbd.log')}")
            time.sleep(0.2)
        self.run("sacctmgr", "-i", "add", "cluster", self.cluster_name)
        self.add_account("research")

    def _dbd_answers(self) -> bool:
        proc = subprocess.run(
            ["sacctmgr", "-n", "list", "cluster"], capture_output=True, env=self.env, timeout=10
        )
        return proc.returncode == 0

    def add_account(self, name: str, users: Sequence[str] = ("root",)) -> None:
        """An accounting account (gpuhint's default VC mapping) with ``users`` in it."""
        self.run("sacctmgr", "-i", "add", "account", name, f"Cluster={self.cluster_name}")
        for u in users:
            self.run("sacctmgr", "-i", "add", "user", u, f"Account={name}")

    # ------------------------------------------------------------------ stop
    def _pid(self, path: Path) -> int | None:
        try:
            pid = int(path.read_text().strip())
            os.kill(pid, 0)
            return pid
        except (OSError, ValueError):
            return None

    def stop(self) -> None:
        """Cancel every job, stop every daemon of this cluster by PID, remove a temp dir."""
        d = self.dir
        run = d / "run"
        ctld = self._pid(run / "slurmctld.pid")
        if ctld is not None:
            with contextlib.suppress(Exception):
                self.run("scancel", "--full", "--quiet", "-u", "root", check=False, timeout=10)
                self.run("scontrol", "shutdown", check=False, timeout=10)
        pids = [p for f in sorted(run.glob("slurm*.pid")) if (p := self._pid(f)) is not None]
        _terminate(pids, wait=5.0, grace=5.0 if ctld is not None else 0.0)
        _kill_leftovers(str(self.conf))
        for f in (run / "slurmdbd.pid", run / "mariadbd.pid", d / "munge" / "munged.pid"):
            if (p := self._pid(f)) is not None:
                _terminate([p], wait=10.0)
        if self._mariadb is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._mariadb.wait(5)
        if self._tmp:
            shutil.rmtree(self._tmp, ignore_errors=True)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _terminate(pids: Sequence[int], wait: float, grace: float = 0.0) -> None:
    """Give ``pids`` ``grace`` seconds to exit, SIGTERM them, wait ``wait``, SIGKILL the rest."""
    alive = list(pids)
    for limit, sig in ((grace, None), (wait, signal.SIGTERM), (2.0, signal.SIGKILL)):
        if sig is not None:
            for p in alive:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(p, sig)
        deadline = time.monotonic() + limit
        while alive and time.monotonic() < deadline:
            alive = [p for p in alive if _alive(p)]
            if alive:
                time.sleep(0.05)
        if not alive:
            return


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    with contextlib.suppress(OSError):
        # a zombie of ours is gone for our purposes
        if Path(f"/proc/{pid}/stat").read_text().split(") ")[-1].startswith("Z"):
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)
            return False
    return True


def _kill_leftovers(conf: str) -> None:
    """SIGKILL slurmstepd and job processes of this cluster (``SLURM_CONF=conf`` in their env)."""
    me = os.getpid()
    marker = f"SLURM_CONF={conf}".encode()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == me:
            continue
        try:
            env = (proc / "environ").read_bytes().split(b"\0")
            comm = (proc / "comm").read_text().strip()
        except OSError:
            continue
        if marker in env and (
            comm == "slurmstepd" or any(e.startswith(b"SLURM_JOB_ID=") for e in env)
        ):
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(proc.name), signal.SIGKILL)


@contextlib.contextmanager
def slurm_service(nodes: int = 4, sched: str = "builtin") -> Iterator[tuple[str, str]]:
    """Yield (SLURM_CONF path, how): ``GPUHINT_TEST_SLURM`` (a slurm.conf), else a local one."""
    env = os.environ.get("GPUHINT_TEST_SLURM")
    if env:
        if not Path(env).is_file():
            raise ServiceError(f"GPUHINT_TEST_SLURM={env}: no such slurm.conf")
        yield env, f"env GPUHINT_TEST_SLURM={env}"
        return
    t0 = time.monotonic()
    with LocalSlurm(nodes, sched=sched) as s:
        s.start()
        yield (
            str(s.conf),
            (
                f"local Slurm, {nodes} nodes x {s.gpus} GPUs, sched/{sched}, slurmdbd, "
                f"started in {time.monotonic() - t0:.1f} s ({s.dir})"
            ),
        )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m gpuhint.lab.local.slurm",
        description="Run a loopback-only Slurm cluster (N nodes x 8 fake GPUs, slurmdbd) "
        "until Ctrl-C, or --detach to leave it running (stop it with --stop DIR).",
    )
    p.add_argument("--nodes", type=int, default=4, help="nodes n1..nN (4)")
    p.add_argument("--gpus", type=int, default=8, help="fake GPUs per node (8)")
    p.add_argument("--sched", choices=["builtin", "backfill"], default="builtin")
    p.add_argument("--no-accounting", action="store_true", help="no slurmdbd/MariaDB (no sacct)")
    p.add_argument("--dir", type=Path, help="cluster directory (default: a new temp dir)")
    p.add_argument("--detach", action="store_true", help="start, print, exit; leave it running")
    p.add_argument("--print-env", action="store_true", help="print 'export SLURM_CONF=...'")
    p.add_argument("--stop", type=Path, metavar="DIR", help="stop the cluster in DIR and exit")
    args = p.parse_args(argv)
    if args.stop:
        if not (args.stop / "etc" / "slurm.conf").is_file():
            print(
                f"error: {args.stop}: no etc/slurm.conf, not a cluster directory", file=sys.stderr
            )
            return 2
        LocalSlurm(workdir=args.stop, accounting=True).stop()
        print(f"stopped the cluster in {args.stop}", file=sys.stderr)
        return 0
    if args.nodes < 1 or args.gpus < 1:
        print("error: --nodes and --gpus must be >= 1", file=sys.stderr)
        return 2
    workdir = args.dir or (Path(tempfile.mkdtemp(prefix="gpuhint-slurm-")) if args.detach else None)
    s = LocalSlurm(
        args.nodes, gpus=args.gpus, sched=args.sched, accounting=not args.no_accounting,
        workdir=workdir,
    )  # fmt: skip
    t0 = time.monotonic()
    try:
        s.start()
    except ServiceError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if args.print_env:
        print(f"export SLURM_CONF={s.conf}")
    print(
        f"Slurm: {args.nodes} nodes x {args.gpus} GPUs, sched/{args.sched}, up in "
        f"{time.monotonic() - t0:.1f} s; SLURM_CONF={s.conf}",
        file=sys.stderr,
    )
    if args.detach:
        print(f"stop it with: python -m gpuhint.lab.local.slurm --stop {s.dir}", file=sys.stderr)
        return 0
    try:
        signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        s.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
