"""What the scheduler adapters share: a normalised job view, change tracking, host lists.

An adapter (:mod:`gpuhint.slurm.jobs`, :mod:`gpuhint.kueue.pods`) turns one snapshot of the
scheduler's state into :class:`SchedJob` rows; :class:`JobTracker` compares each
snapshot with the last one and emits only the lifecycle steps that changed, as
:class:`~gpuhint.wire.contract.JobEvent` (submitted -> started -> finished, never twice).

>>> t = JobTracker(cluster="c")
>>> j = SchedJob("7", "pending", submit_time=100.0, vc="gpu", num_gpus=2)
>>> [e.phase.value for e in t.update([j], now=101.0)]
['submitted']
>>> t.update([j], now=102.0)
[]
>>> done = SchedJob("7", "finished", final=JobState.COMPLETED, submit_time=100.0,
...                 start_time=110.0, end_time=170.0, vc="gpu", num_gpus=2)
>>> [(e.phase.value, e.duration_s) for e in t.update([done], now=171.0)]
[('started', None), ('finished', 60.0)]
>>> expand_hostlist("gpu[01-03,07],login1")
('gpu01', 'gpu02', 'gpu03', 'gpu07', 'login1')
"""

from __future__ import annotations

import logging
import os
import re
import shlex
import subprocess
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol, TypeVar

from gpuhint.wire.contract import TEXT_MAX, JobEvent, JobPhase, JobState

_T = TypeVar("_T")

log = logging.getLogger(__name__)

Status = Literal["pending", "running", "finished"]
_ORDER: dict[str, int] = {"pending": 0, "running": 1, "finished": 2}


class SchedulerError(RuntimeError):
    """The scheduler's view could not be read or parsed (one line, for the log)."""


@dataclass(frozen=True)
class SchedJob:
    """One job as a scheduler shows it now; times are UNIX seconds or None if unknown."""

    job_id: str
    status: Status
    final: JobState | None = None
    submit_time: float | None = None
    start_time: float | None = None
    end_time: float | None = None
    user: str | None = None
    vc: str = "default"
    name: str | None = None
    num_gpus: int = 0
    num_cpus: int | None = None
    num_nodes: int | None = None
    nodes: tuple[str, ...] = ()
    partition: str | None = None
    time_limit_s: float | None = None


class JobTracker:
    """Keeps the last-seen lifecycle step of each job and emits only changes.

    * A job seen for the first time emits every step up to its current one (a running
      job: submitted then started), so a consumer that starts late still sees whole
      lifecycles; ``started`` is skipped for jobs that finished without ever starting.
    * A job that goes back (a requeue: running -> pending) emits nothing.
    * A job not yet finished that shows up under another VC (moved to another partition
      or queue) is announced finished in its old VC (``vanished_state``, no run time)
      and emitted from ``submitted`` on in its new one.
    * A job that vanishes before it was seen finished emits ``finished`` with state
      ``vanished_state`` (default UNKNOWN) at the time of the snapshot.

    * ``keep_finished_s``: a finished job missing from a snapshot is remembered for that
      long after its end (default 0: forgotten at once), so a source that skips a record
      in one snapshot and lists it again does not announce it twice.
    * ``vanish_after``: how many snapshots in a row a job must miss before it is
      announced vanished (default 1). ``sacct`` can leave a pending array's tasks out of
      one poll while it splits the array record (seen on Slurm 22.05); 2 absorbs that.

    Memory is bounded by the size of the scheduler's own view (plus, with
    ``keep_finished_s``, the jobs that ended within it).
    """

    def __init__(
        self,
        *,
        cluster: str = "default",
        vanished_state: JobState = JobState.UNKNOWN,
        keep_finished_s: float = 0.0,
        vanish_after: int = 1,
    ):
        self.cluster = cluster
        self.vanished_state = vanished_state
        self.keep_finished_s = keep_finished_s
        self.vanish_after = vanish_after
        self._missed: dict[str, int] = {}  # job -> snapshots missed in a row
        self._step: dict[str, int] = {}
        self._jobs: dict[str, SchedJob] = {}
        self._vcs: set[str] = set()  # every VC a job was seen in since start

    def roster(self) -> dict[str, list[str]]:
        """The jobs not yet seen finished, by VC; every VC seen since start is listed,
        an empty one too (its roster retires what a consumer still holds there)."""
        out: dict[str, list[str]] = {vc: [] for vc in sorted(self._vcs)}
        for job_id, job in self._jobs.items():
            if self._step.get(job_id, 2) < 2:
                out.setdefault(_vc(job), []).append(job_id)
        return out

    def update(self, jobs: Iterable[SchedJob], now: float) -> list[JobEvent]:
        events: list[JobEvent] = []
        seen: set[str] = set()
        for job in jobs:
            seen.add(job.job_id)
            self._vcs.add(_vc(job))
            self._missed.pop(job.job_id, None)
            prev = self._step.get(job.job_id, -1)
            before = self._jobs.get(job.job_id)
            if before is not None and prev < 2 and _vc(before) != _vc(job):
                # moved to another partition or queue: its old VC hears it end with no
                # run time (a cancel: nothing learned), or it would wait there for ever
                events.extend(self._ended(before, now, f"left VC {_vc(before)}", start_time=None))
                prev = -1  # its new VC hears the whole lifecycle
            target = _ORDER[job.status]
            try:
                new = [
                    self._event(job, step, now)
                    for step in range(prev + 1, target + 1)
                    # a job that finished without starting (cancelled while pending)
                    if not (step == 1 and target == 2 and job.start_time is None)
                ]
            except ValueError as exc:  # one job the contract refuses: skip it, not the poll
                log.warning("job %s: not published, %s", job.job_id, _first_line(exc))
                continue
            events.extend(new)
            self._step[job.job_id] = max(prev, target)
            self._jobs[job.job_id] = job
        for job_id in [j for j in self._step if j not in seen]:
            if self._recently_finished(job_id, now):
                continue
            if self._step[job_id] < 2 and self._count_miss(job_id) < self.vanish_after:
                continue
            self._missed.pop(job_id, None)
            step = self._step.pop(job_id)
            job = self._jobs.pop(job_id)
            if step < 2:
                events.extend(self._ended(job, now, "vanished"))
        return events

    def _ended(self, job: SchedJob, now: float, why: str, **changes: Any) -> list[JobEvent]:
        """``job`` announced ``finished`` now with ``vanished_state`` (``changes`` on top);
        none when the contract refuses that event (e.g. a run past its cap: logged, and
        the poll goes on, else every poll and every restart would fail on it)."""
        ended = {"status": "finished", "final": self.vanished_state, **changes}
        try:
            return [self._event(SchedJob(**{**job.__dict__, **ended}), 2, now, end_time=now)]
        except ValueError as exc:
            log.warning("job %s: %s, not published, %s", job.job_id, why, _first_line(exc))
            return []

    def _count_miss(self, job_id: str) -> int:
        """One more snapshot in a row without ``job_id``; how many now."""
        self._missed[job_id] = n = self._missed.get(job_id, 0) + 1
        return n

    def _recently_finished(self, job_id: str, now: float) -> bool:
        """Seen finished, ended within ``keep_finished_s``: remembered though unlisted."""
        if self._step[job_id] < 2 or self.keep_finished_s <= 0:
            return False
        end = self._jobs[job_id].end_time
        return end is not None and now - end < self.keep_finished_s

    def running_on(self, node: str) -> list[str]:
        """Job ids last seen running with ``node`` among their nodes."""
        return [
            j.job_id
            for j in self._jobs.values()
            if self._step.get(j.job_id) == 1 and node in j.nodes
        ]

    def _event(
        self, job: SchedJob, step: int, now: float, end_time: float | None = None
    ) -> JobEvent:
        submit = job.submit_time if job.submit_time is not None else now
        phase = (JobPhase.SUBMITTED, JobPhase.STARTED, JobPhase.FINISHED)[step]
        end = end_time if end_time is not None else job.end_time
        t = {0: submit, 1: job.start_time, 2: end}[step]
        duration = None
        state = None
        if step == 2:
            state = job.final or JobState.UNKNOWN
            if job.start_time is not None and end is not None:
                duration = max(0.0, end - job.start_time)
        return JobEvent(
            phase=phase,
            job_id=job.job_id,
            cluster=self.cluster,
            vc=_vc(job),
            user=_clip(job.user),
            name=_clip(job.name),
            num_gpus=max(0, job.num_gpus),
            num_cpus=job.num_cpus,
            num_nodes=job.num_nodes,
            time=t if t is not None else now,
            submit_time=submit,
            start_time=job.start_time if step >= 1 else None,
            duration_s=duration,
            state=state,
            nodes=job.nodes if step >= 1 else (),
            partition=_clip(job.partition),
            time_limit_s=job.time_limit_s,
        )


_BRACKET = re.compile(r"^(.*?)\[([^\]]+)\](.*)$")


def _vc(job: SchedJob) -> str:
    return job.vc or "default"


def _clip(text: str | None) -> str | None:
    """A free-form label cut to the contract's bound (Slurm takes a job name of any
    length): a job with a long name is published, not refused on every poll."""
    return text[:TEXT_MAX] if text else text


def _first_line(exc: Exception) -> str:
    lines = str(exc).splitlines()
    return " ".join(lines[:3]) if lines else type(exc).__name__


def expand_hostlist(spec: str | None) -> tuple[str, ...]:
    """Expand a Slurm host list (``gpu[01-03,07],login1``) into host names.

    Slurm's words for "no node" (``None assigned`` in sacct for a job cancelled while
    pending, ``(null)``, ``Unknown``) give none.

    >>> expand_hostlist("None assigned"), expand_hostlist("(null)")
    ((), ())
    """
    if not spec or spec.strip() in ("(null)", "None", "None assigned", "Unknown", "n/a"):
        return ()
    parts, depth, cur = [], 0, ""
    for ch in spec:
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
            continue
        depth += ch == "["
        depth -= ch == "]"
        cur += ch
    parts.append(cur)
    out: list[str] = []
    for part in parts:
        out.extend(_expand_one(part.strip()))
    return tuple(h for h in out if h)


def _expand_one(part: str) -> list[str]:
    m = _BRACKET.match(part)
    if not m:
        return [part]
    head, body, tail = m.groups()
    out = []
    for rng in body.split(","):
        lo, _, hi = rng.partition("-")
        if hi and lo.isdigit() and hi.isdigit():
            width = len(lo)
            for n in range(int(lo), int(hi) + 1):
                out.extend(_expand_one(f"{head}{n:0{width}d}{tail}"))
        else:
            out.extend(_expand_one(f"{head}{rng}{tail}"))
    return out


def read_source(source: str | Sequence[str], *, timeout_s: float = 60.0) -> str:
    """Text of a snapshot: a command (a list, or ``cmd:`` + a shell-quoted line) or a file."""
    if isinstance(source, str) and not source.startswith("cmd:"):
        try:
            return Path(source).read_text(encoding="utf-8", errors="replace")
        except OSError as exc:
            raise SchedulerError(f"cannot read {source}: {exc}") from None
    argv = shlex.split(source[4:]) if isinstance(source, str) else list(source)
    if not argv:
        raise SchedulerError("cmd: needs a command")
    try:
        proc = subprocess.run(  # a job name or comment in Latin-1 must not fail the poll
            argv, capture_output=True, text=True, errors="replace", timeout=timeout_s, check=False
        )
    except FileNotFoundError:
        raise SchedulerError(f"{argv[0]}: command not found") from None
    except subprocess.TimeoutExpired:
        raise SchedulerError(f"{' '.join(argv)} timed out after {timeout_s:.0f} s") from None
    if proc.returncode != 0:
        first = (proc.stderr.strip().splitlines() or ["no message"])[0]
        raise SchedulerError(f"{' '.join(argv)} exited {proc.returncode}: {first}")
    return proc.stdout


class _Polled(Protocol):
    name: str
    failures: int


def guarded_read(feed: _Polled, read: Callable[[], _T]) -> _T | None:
    """``read()``, or None when it raises :class:`SchedulerError`: counted in
    ``feed.failures``, logged at the first failure and every 60th, and the first success
    after failures is logged (a scheduler outage is a warning a minute, not a flood)."""
    try:
        out = read()
    except SchedulerError as exc:
        feed.failures += 1
        if feed.failures == 1 or feed.failures % 60 == 0:
            log.warning("%s: %s (failure %d; will retry)", feed.name, exc, feed.failures)
        return None
    if feed.failures:
        log.warning("%s: readable again after %d failure(s)", feed.name, feed.failures)
        feed.failures = 0
    return out


@dataclass
class SchedulerFeed:
    """One scheduler source: where to read a snapshot, how to parse it, and its tracker."""

    name: str
    source: str | Sequence[str]
    parse: Callable[[str], list[SchedJob]]
    tracker: JobTracker
    timeout_s: float = 60.0
    failures: int = field(default=0)

    def poll(self, now: float) -> list[JobEvent]:
        jobs = guarded_read(
            self, lambda: self.parse(read_source(self.source, timeout_s=self.timeout_s))
        )
        return [] if jobs is None else self.tracker.update(jobs, now)

    def vcs(self) -> list[str]:
        """The VCs the scheduler defines, rostered even when none of their jobs is seen
        (a VC emptied while a restarted agent was away is reconciled too); none here."""
        return []

    def lists_every_unfinished_job(self) -> bool:
        """Whether each read lists every job not finished (what a roster needs)."""
        return True

    def identity(self) -> str:
        """What this feed reads, for the agent's roster identity: two feeds that read
        different schedulers (or map their jobs to VCs differently) differ."""
        return f"{self.tracker.cluster}|{self.name}|{self.named_source()}"

    def named_source(self) -> str:
        """The source as the identity names it: a file by its absolute path (the same
        file from another working directory, whether it exists yet or not), a command
        as given."""
        src = self.source
        if isinstance(src, str) and not src.startswith("cmd:"):
            return os.path.abspath(src)
        return repr(src)

    def durable(self) -> None:
        """The events of the polls so far are safe (acknowledged, or kept on disk): a
        feed with a watermark writes it now (this one keeps none)."""
