"""Expected starts -> each pending job's Slurm ``Comment`` (pure: the text and the plan).

gpuhint forecasts when each of a VC's first waiting jobs should start
(:mod:`gpuhint.cores.start_forecast`, Redis ``starts:{cluster}:{vc}``); the SiteFactor
applier writes it where Slurm users look: the job's comment (``squeue -o %k``,
``scontrol show job``, ``sacct -o Comment``). One compact, parseable form, all times UTC::

    gpuhint:start=2026-12-05T14:05Z,band80=13:40Z..15:10Z,asof=13:02Z

``start``: the expected start; ``band80``: its 80% band; ``asof``: when the forecast was
made. A time written ``HH:MMZ`` is on the UTC day of ``start``; any other day is written
in full. The text has no blank: ``scontrol`` reads its batch from stdin, where a quoted
value keeps its quotes, so a blank could not be written.

What is written, every pass (:func:`plan_comments`):

* only to **pending**, not held jobs whose comment is **empty or gpuhint's own** (starts
  with ``gpuhint:``): a comment a user set is never overwritten (``user_kept``);
* the forecast's text when the job is in a forecast; when it is not (beyond a VC's first
  jobs, or the forecast is gone) a gpuhint comment is **cleared**;
* only when the text changes (a steady queue costs no update); at most ``max_updates``.

>>> t = comment_text(Start(1764943500.0, 1764942000.0, 1764947400.0, 1764939720.0))
>>> t
'gpuhint:start=2025-12-05T14:05Z,band80=13:40Z..15:10Z,asof=13:02Z'
>>> parse_comment(t) == Start(1764943500.0, 1764942000.0, 1764947400.0, 1764939720.0)
True
"""

from __future__ import annotations

import calendar
import re
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol

PREFIX = "gpuhint:"


class Start(NamedTuple):
    """A job's expected start, its 80% band and the forecast's time (UNIX seconds)."""

    expected: float
    low: float
    high: float
    asof: float


def _minute(t: float) -> float:
    return float(round(t / 60.0) * 60)


def _day(t: float) -> str:
    return time.strftime("%Y-%m-%d", time.gmtime(_minute(t)))


def _clock(t: float, day: str) -> str:
    """``HH:MMZ`` on ``day`` (UTC), else ``YYYY-MM-DDTHH:MMZ``."""
    t = _minute(t)
    hm = time.strftime("%H:%MZ", time.gmtime(t))
    return hm if _day(t) == day else f"{_day(t)}T{hm}"


def comment_text(s: Start) -> str:
    """The comment for a job expected to start at ``s`` (minutes, UTC; no blank)."""
    day = _day(s.expected)
    return (
        f"{PREFIX}start={day}T{time.strftime('%H:%MZ', time.gmtime(_minute(s.expected)))},"
        f"band80={_clock(s.low, day)}..{_clock(s.high, day)},asof={_clock(s.asof, day)}"
    )


_TIME = r"(?:\d{4}-\d\d-\d\dT)?\d\d:\d\dZ"
_TEXT = re.compile(
    rf"gpuhint:start=(\d{{4}}-\d\d-\d\dT\d\d:\d\dZ),band80=({_TIME})\.\.({_TIME}),asof=({_TIME})"
)


def _parse_time(text: str, day: str) -> float:
    full = text if "T" in text else f"{day}T{text}"
    return float(calendar.timegm(time.strptime(full, "%Y-%m-%dT%H:%MZ")))


def parse_comment(text: str) -> Start | None:
    """The :class:`Start` a gpuhint comment says (to the minute), or None."""
    m = _TEXT.fullmatch(text.strip())
    if m is None:
        return None
    day = m.group(1)[:10]
    return Start(*(_parse_time(g, day) for g in m.groups()))


def is_ours(comment: str) -> bool:
    """May gpuhint write this comment? Empty, or gpuhint's own."""
    return not comment.strip() or comment.startswith(PREFIX)


@dataclass(frozen=True)
class CommentUpdate:
    """``scontrol update jobid=... Comment=...`` for jobs that get the same text."""

    job_ids: tuple[str, ...]
    text: str  # "": clear the comment

    @property
    def line(self) -> str:
        return f"update jobid={','.join(self.job_ids)} Comment={self.text}"


@dataclass
class CommentPlan:
    updates: list[CommentUpdate] = field(default_factory=list)
    set: int = 0  # jobs given a forecast's text
    cleared: int = 0  # jobs whose gpuhint comment is cleared (no forecast now)
    unchanged: int = 0
    user_kept: int = 0  # jobs with a comment of their own: never touched
    deferred: int = 0  # over max_updates: left for the next pass

    @property
    def jobs(self) -> int:
        return sum(len(u.job_ids) for u in self.updates)


class QueuedJob(Protocol):
    """What the plan reads of a job (:class:`gpuhint.slurm.priority.SlurmJob`)."""

    @property
    def job_id(self) -> str: ...
    @property
    def state(self) -> str: ...
    @property
    def held(self) -> bool: ...
    @property
    def comment(self) -> str | None: ...


def plan_comments(
    jobs: Iterable[QueuedJob],
    starts: Mapping[str, Start],
    *,
    max_updates: int | None = None,
    per_line: int = 100,
) -> CommentPlan:
    """The comment updates of one pass (module docstring). A job whose comment is
    unknown (``comment`` None: the port did not read it) is left alone. Over
    ``max_updates``, the jobs expected to start soonest go first, clears last."""
    plan = CommentPlan()
    todo: list[tuple[float, str, str]] = []  # (order, job id, text)
    for job in jobs:
        if job.state != "PENDING" or job.comment is None:
            continue
        start = None if job.held else starts.get(job.job_id)
        if not is_ours(job.comment):
            plan.user_kept += start is not None
            continue
        text = "" if start is None else comment_text(start)
        if text == job.comment.strip():
            plan.unchanged += start is not None
            continue
        todo.append((float("inf") if start is None else start.expected, job.job_id, text))
    todo.sort()
    if max_updates is not None and len(todo) > max_updates:
        plan.deferred = len(todo) - max_updates
        todo = todo[:max_updates]
    by_text: dict[str, list[str]] = {}
    for _, job_id, text in todo:
        by_text.setdefault(text, []).append(job_id)
        plan.set += bool(text)
        plan.cleared += not text
    for text, ids in by_text.items():
        for i in range(0, len(ids), per_line):
            plan.updates.append(CommentUpdate(tuple(ids[i : i + per_line]), text))
    return plan


def comment_counts(plan: CommentPlan | None, refused: int = 0) -> dict[str, int]:
    """The pass record's comment keys (all 0 when comments are off; ``comments_refused``:
    Slurm's refusals among the comment lines)."""
    p = plan or CommentPlan()
    return {
        "comments_set": p.set,
        "comments_cleared": p.cleared,
        "comments_unchanged": p.unchanged,
        "comments_user_kept": p.user_kept,
        "comments_deferred": p.deferred,
        "comments_refused": refused,
    }
