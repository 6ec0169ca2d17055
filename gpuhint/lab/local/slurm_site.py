"""One test's or bench's view of a shared local Slurm cluster and Redis: the CLI, a
cluster name of its own, the environment a ``gpuhint`` command needs, and small helpers
(submit a job, read SiteFactors, wait for a condition).

>>> site = SlurmSite("/tmp/slurm.conf", "redis://127.0.0.1:6379/0", "t1-")
>>> site.cluster, site.env["GPUHINT_KEY_PREFIX"], site.env["SLURM_CONF"]
('ct1-', 't1-', '/tmp/slurm.conf')
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from gpuhint.slurm.commands import SlurmCli


@dataclass(frozen=True)
class SlurmSite:
    """``conf``: the cluster's slurm.conf; ``prefix``: this run's Redis key prefix; the
    gpuhint cluster is named ``cluster_letter + prefix`` (one per test)."""

    conf: str
    redis_url: str
    prefix: str
    cluster_letter: str = "c"
    cli: SlurmCli = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "cli", SlurmCli(self.conf))

    @property
    def cluster(self) -> str:
        return self.cluster_letter + self.prefix

    @property
    def env(self) -> dict[str, str]:
        """This process's environment plus what a gpuhint command needs for this site."""
        return {
            **os.environ,
            "SLURM_CONF": self.conf,
            "GPUHINT_REDIS_URL": self.redis_url,
            "GPUHINT_KEY_PREFIX": self.prefix,
            "GPUHINT_CLUSTER": self.cluster,
        }

    def sbatch(self, *args: str) -> str:
        """Submit a batch job to partition ``gpu`` (output to /dev/null); its job id."""
        return sbatch(self.cli, *args)

    def site_factors(self) -> dict[str, int]:
        """Each pending job's SiteFactor, as ``sprio`` shows it."""
        out = self.cli.run(["sprio", "-h", "-o", "%i|%S"], check=False)
        return {a: int(b) for a, _, b in (ln.partition("|") for ln in out.split()) if b}


def sbatch(cli: SlurmCli, *args: str) -> str:
    """Submit a batch job to partition ``gpu`` (output to /dev/null); its job id."""
    out = cli.run(["sbatch", "--parsable", "-o", "/dev/null", "-p", "gpu", *args])
    return out.strip().split(";")[0]


def until(what: str, cond: Callable[[], bool], timeout: float, step: float = 0.3) -> None:
    """Wait for ``cond()``; raise ``AssertionError`` naming ``what`` after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(step)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
