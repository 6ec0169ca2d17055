"""The agent's Slurm feed against a real slurmctld + slurmdbd: lifecycles, restarts."""

from __future__ import annotations

import collections
import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from gpuhint.lab.local.slurm_site import sbatch, until
from gpuhint.slurm.commands import SlurmCli
from gpuhint.slurm.feed import slurm_feed
from gpuhint.wire.contract import JobEvent, JobPhase, JobState

pytestmark = pytest.mark.integration


def _state(cli: SlurmCli, job_id: str) -> str:
    return cli.run(["squeue", "-h", "-j", job_id, "-o", "%T"], check=False).strip()


def _steps_alive(job_id: str) -> bool:
    """Whether any slurmstepd of the job still runs (the loopback cluster's nodes are local)."""
    title = f"slurmstepd: [{job_id}.".encode()
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if cmdline.read_bytes().startswith(title):
                return True
        except OSError:  # the process ended while we looked
            continue
    return False


def _explain(cli: SlurmCli, job_id: str) -> str:
    """What Slurm's accounting and the node's slurmd log say of one job (for a failure)."""
    fields = "JobID,State,ExitCode,DerivedExitCode,Reason,Submit,Start,End,NodeList"
    sacct = cli.run(["sacct", "-X", "-P", "-j", job_id, "-o", fields], check=False)
    log_dir = Path(os.environ["SLURM_CONF"]).parent.parent / "log"
    lines = [
        f"{log.name}: {line}"
        for log in sorted(log_dir.glob("slurm*.log"))
        for line in log.read_text(errors="replace").splitlines()
        if f"JobId={job_id} " in line or f"job {job_id} " in line.lower() or f"[{job_id}." in line
    ]
    return f"sacct:\n{sacct}\nlogs:\n" + "\n".join(lines[-40:])


def test_lifecycles_survive_a_restart(
    slurm_conf: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SLURM_CONF", slurm_conf)
    cli = SlurmCli(slurm_conf)
    common = ["--account", "research", "-G", "2"]
    jobs = {
        "timeout": sbatch(cli, *common, "-t", "1", "-J", "tmo", "--wrap", "sleep 300"),
        "ok": sbatch(cli, *common, "-t", "5", "-J", "ok", "--wrap", "sleep 3"),
        "fail": sbatch(cli, *common, "-t", "5", "-J", "fail", "--wrap", "sleep 1; exit 3"),
        "cancel": sbatch(cli, *common, "-t", "5", "-J", "cnl", "--wrap", "sleep 300"),
        "requeue": sbatch(cli, *common, "-t", "5", "--requeue", "-J", "rq", "--wrap", "sleep 6"),
    }
    array = sbatch(cli, *common, "-t", "5", "-a", "0-2", "-J", "arr", "--wrap", "sleep 2")
    ids = {**{v: k for k, v in jobs.items()}, **{f"{array}_{i}": f"arr{i}" for i in range(3)}}
    state = tmp_path / "slurm-watermark.json"
    events: list[JobEvent] = []
    feed = slurm_feed("sacct", cluster="test", state_path=state)

    def poll() -> None:
        events.extend(e for e in feed.poll(time.time()) if e.job_id in ids)
        feed.durable()  # kept in ``events``: safe, as the agent's once Kafka has them

    def phases(job: str) -> list[JobPhase]:
        return [e.phase for e in events if e.job_id == job]

    def seen(job: str, phase: JobPhase) -> Callable[[], bool]:
        return lambda: (poll(), phase in phases(job))[1]

    until("the cancel job to start", seen(jobs["cancel"], JobPhase.STARTED), 60)
    cli.run(["scancel", jobs["cancel"]])
    until("the requeue job to run", lambda: _state(cli, jobs["requeue"]) == "RUNNING", 60)
    poll()
    # Held while requeued, released once its first run's steps are gone and a whole second
    # has passed: slurmd refuses a batch launch whose credential is not newer than the job's
    # revocation, in whole seconds (cred_revoked: `ctime <= revoked`), so a relaunch in the
    # requeue's own second FAILs ("Job N already killed, do not launch batch job"). Slurm
    # itself delays a requeued job by CredExpire; the test's StartTime=now skips that delay.
    cli.run(["scontrol", "requeuehold", jobs["requeue"]])
    until("the requeue job to wait", lambda: _state(cli, jobs["requeue"]) == "PENDING", 30)
    until("its first run to end", lambda: not _steps_alive(jobs["requeue"]), 60)
    time.sleep(2.0)
    cli.run(["scontrol", "release", jobs["requeue"]])
    cli.run(["scontrol", "update", f"jobid={jobs['requeue']}", "StartTime=now"])
    poll()
    # the agent "restarts": a new feed from the same watermark, transitions in between
    del feed
    time.sleep(4)
    feed = slurm_feed("sacct", cluster="test", state_path=state)
    until(
        "every job to finish",
        lambda: (poll(), all(JobPhase.FINISHED in phases(j) for j in ids))[1],
        150,
        step=1.0,
    )
    for _ in range(3):  # nothing more comes
        time.sleep(1)
        poll()
    count = collections.Counter((e.job_id, e.phase) for e in events)
    dups = {k: n for k, n in count.items() if n > 1}
    assert not dups, f"duplicate events: {dups}"
    for job, label in ids.items():
        want = [JobPhase.SUBMITTED, JobPhase.STARTED, JobPhase.FINISHED]
        assert phases(job) == want, f"{label} ({job}): {phases(job)}"
    final = {ids[e.job_id]: e for e in events if e.phase is JobPhase.FINISHED}
    want_state = {
        "ok": JobState.COMPLETED,
        "fail": JobState.FAILED,
        "cancel": JobState.CANCELLED,
        "timeout": JobState.TIMEOUT,
        "requeue": JobState.COMPLETED,
        **{f"arr{i}": JobState.COMPLETED for i in range(3)},
    }
    for label, wanted in want_state.items():
        job = final[label].job_id
        assert final[label].state is wanted, f"{label}: {final[label]}\n{_explain(cli, job)}"
    ok = final["ok"]
    assert (ok.user, ok.vc, ok.partition, ok.name) == ("root", "research", "gpu", "ok")
    assert ok.num_gpus == 2 and ok.time_limit_s == 300.0 and ok.nodes
    assert final["timeout"].time_limit_s == 60.0
    assert ok.duration_s is not None and 2.0 <= ok.duration_s <= 30.0
    # the requeued job's duration is its second run's
    assert final["requeue"].duration_s is not None and final["requeue"].duration_s >= 5.0
    assert os.path.getsize(state) > 0
