"""A job feed's watermark: what it already published, kept across an agent restart.

After each poll that read the scheduler, a :class:`WatermarkedFeed` keeps its tracker's
view (the lifecycle step published for each job it still sees) and the poll time, and
writes them to a small JSON file (fsync'd, renamed over the old one) when its caller
says the poll's events are safe (:meth:`WatermarkedFeed.durable`: acknowledged, or kept
on disk). A restarted feed reads it back, so it publishes
no duplicate, and a job in the watermark but missing from the first snapshot (it
vanished while the agent was down) is published ``finished`` with the tracker's
``vanished_state``. A failed read writes nothing (no job is taken for vanished).

The document: ``{"version": 1, "kind": FEED, "cluster": ..., "polled_at": ...,
"jobs": [{"step": 0|1|2, "job": {...}}]}``. ``kind`` names the feed (``slurm``,
``kueue``, ``pods``) whose job ids the file holds; the first Slurm watermarks have none
and still load where ``untagged`` allows it (Slurm, ``gpuhint serve``).

>>> t = JobTracker(cluster="c")
>>> _ = t.update([SchedJob("7", "running", submit_time=1.0, start_time=2.0)], now=3.0)
>>> doc = tracker_doc(t, 3.0, "pods")
>>> t2 = JobTracker(cluster="c")
>>> restore_tracker(t2, doc, "w.json", "pods"), t2._step
(3.0, {'7': 1})
>>> restore_tracker(JobTracker(cluster="c"), doc, "w.json", "slurm")
Traceback (most recent call last):
ValueError: w.json: watermark of the pods feed, not of the slurm feed
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import tempfile
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from gpuhint.cores.job_tracker import (
    JobTracker,
    SchedJob,
    SchedulerFeed,
    guarded_read,
    read_source,
)
from gpuhint.wire.contract import JobEvent, JobState

log = logging.getLogger(__name__)

WATERMARK_VERSION = 1

WITHOUT_WATERMARK = (
    "%s feed without --%s-state: after a restart every job is announced again, and jobs "
    "that ended while the agent was down are never announced finished (they stay waiting "
    "in the worker's queue and forecasts); give it a watermark file (docs/agent.md)"
)


def warn_without_watermark(feeds: Iterable[SchedulerFeed], log: logging.Logger) -> list[str]:
    """Warn once per job feed that keeps no watermark file; the names of those feeds."""
    bare = [f.name for f in feeds if getattr(f, "state_path", 0) is None]
    for name in bare:
        log.warning(WITHOUT_WATERMARK, name, name)
    return bare


def tracker_doc(tracker: JobTracker, polled_at: float, kind: str | None = None) -> dict[str, Any]:
    """The tracker's view and the poll time, as the watermark's JSON document."""
    doc: dict[str, Any] = {"version": WATERMARK_VERSION}
    if kind:
        doc["kind"] = kind
    doc.update(
        cluster=tracker.cluster,
        polled_at=polled_at,
        jobs=[
            {"step": tracker._step[job_id], "job": _job_json(job)}
            for job_id, job in tracker._jobs.items()
            if job_id in tracker._step
        ],
    )
    return doc


def save_tracker(
    tracker: JobTracker, path: Path, polled_at: float, kind: str | None = None
) -> None:
    """Write the tracker's view and the poll time to ``path`` (fsync, atomic rename)."""
    _write(tracker_doc(tracker, polled_at, kind), path)


def _write(doc: dict[str, Any], path: Path) -> None:
    """Write a watermark document to ``path``: fsync'd, then renamed over the old one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w") as fh:
            json.dump(doc, fh, separators=(",", ":"))
            fh.flush()
            os.fsync(fh.fileno())  # a host crash must not leave the rename without data
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def load_tracker(
    tracker: JobTracker, path: Path, kind: str | None = None, *, untagged: bool = True
) -> float | None:
    """Restore a tracker saved by :func:`save_tracker`; the last poll time, or None
    when the file does not exist yet.

    Raises ValueError with a one-line reason naming ``path`` when the file is not a
    watermark, or one of another cluster or feed (see :func:`restore_tracker`).
    """
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: not a readable watermark: {_one_line(exc)}") from None
    return restore_tracker(tracker, doc, str(path), kind, untagged=untagged)


def restore_tracker(
    tracker: JobTracker, doc: Any, where: str, kind: str | None = None, *, untagged: bool = True
) -> float | None:
    """Restore a tracker from :func:`tracker_doc`'s document; the last poll time.

    ``kind`` (None: not checked) is the feed's: a document of another feed is refused,
    and one naming no feed (the first Slurm watermarks) too unless ``untagged``.
    """
    if not isinstance(doc, dict) or doc.get("version") != WATERMARK_VERSION:
        raise ValueError(f"{where}: not a gpuhint watermark (version {WATERMARK_VERSION})")
    got = doc.get("kind")
    if kind is not None and (got != kind if got is not None else not untagged):
        theirs = f"the {_shown(got)} feed" if got is not None else "no named feed (a Slurm one)"
        raise ValueError(f"{where}: watermark of {theirs}, not of the {kind} feed")
    if doc.get("cluster") != tracker.cluster:
        raise ValueError(
            f"{where}: watermark of cluster {doc.get('cluster')!r}, not {tracker.cluster!r}"
        )
    try:
        jobs = [(int(item["step"]), _job_from(item["job"])) for item in doc.get("jobs") or []]
    except (KeyError, TypeError, ValueError) as exc:
        why = f"{type(exc).__name__}: {_one_line(exc)}"
        raise ValueError(f"{where}: damaged watermark ({why})") from None
    for step, job in jobs:
        tracker._step[job.job_id] = step
        tracker._jobs[job.job_id] = job
    polled = doc.get("polled_at")
    return float(polled) if isinstance(polled, int | float) else None


def _shown(kind: Any) -> str:
    """A feed name from a file, as an error message may print it: a plain name as is,
    anything else (newlines, escapes, a long string, not a string) quoted and cut."""
    if isinstance(kind, str) and re.fullmatch(r"[a-z][a-z0-9_-]{0,31}", kind):
        return kind
    return repr(kind)[:64]


def _job_json(job: SchedJob) -> dict[str, Any]:
    d = asdict(job)
    d["final"] = job.final.value if job.final else None
    d["nodes"] = list(job.nodes)
    return d


def _job_from(d: dict[str, Any]) -> SchedJob:
    d = dict(d)
    d["final"] = JobState(d["final"]) if d.get("final") else None
    d["nodes"] = tuple(d.get("nodes") or ())
    return SchedJob(**d)


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


@dataclass
class WatermarkedFeed(SchedulerFeed):
    """A :class:`SchedulerFeed` whose tracker outlives a restart in ``state_path``.

    ``kind`` names the feed in the file (its job ids are only meaningful to it);
    ``untagged`` accepts a file that names none (the first Slurm watermarks).
    ``state_path`` None keeps no watermark (a restart starts fresh). Subclasses read
    their snapshot in :meth:`_read`.
    """

    kind: str = ""
    state_path: Path | None = None
    untagged: bool = False
    last_poll: float | None = None
    """The last poll that read the scheduler (None: none yet, nor in the watermark)."""
    _due: dict[str, Any] | None = field(default=None, repr=False)
    """The watermark of the last poll, until :meth:`durable` writes it."""

    def __post_init__(self) -> None:
        if self.state_path is None:
            return
        self.last_poll = load_tracker(
            self.tracker, self.state_path, self.kind or None, untagged=self.untagged
        )
        if self.last_poll is not None:
            log.info(
                "%s: watermark %s: %d job(s), last poll at %.0f",
                self.name,
                self.state_path,
                len(self.tracker._step),
                self.last_poll,
            )

    def _read(self, now: float) -> list[SchedJob]:
        """One snapshot of the scheduler; raises SchedulerError when unreadable."""
        return self.parse(read_source(self.source, timeout_s=self.timeout_s))

    def poll(self, now: float) -> list[JobEvent]:
        """The new events; the watermark they lead to is written by :meth:`durable`,
        once the caller has them safe (a crash in between announces them again, never
        loses them)."""
        jobs = guarded_read(self, lambda: self._read(now))
        if jobs is None:  # unreadable: nothing vanished, the watermark stays
            return []
        events = self.tracker.update(jobs, now)
        self.last_poll = now
        if self.state_path is not None:
            self._due = tracker_doc(self.tracker, now, self.kind or None)
        return events

    def durable(self) -> None:
        """Write the watermark of the last poll (if not written yet)."""
        doc, self._due = self._due, None
        if doc is None or self.state_path is None:
            return
        try:
            _write(doc, self.state_path)
        except OSError as exc:
            self._due = doc  # tried again at the next durable point
            log.warning("%s: cannot write watermark %s: %s", self.name, self.state_path, exc)
