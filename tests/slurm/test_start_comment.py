"""Expected starts into Slurm comments: the text, the plan of a pass, the applier (pure)."""

from __future__ import annotations

import calendar
import time
from collections.abc import Sequence

import pytest

from gpuhint.slurm.priority import Fallback, HintSnapshot, PriorityApplier, SlurmJob
from gpuhint.slurm.start_comment import (
    Start,
    comment_text,
    is_ours,
    parse_comment,
    plan_comments,
)


def _t(text: str) -> float:
    """UNIX seconds of ``YYYY-MM-DDTHH:MM`` UTC."""
    return float(calendar.timegm(time.strptime(text, "%Y-%m-%dT%H:%M")))


def _s(*texts: str) -> Start:
    return Start(*(_t(x) for x in texts))


def test_text_is_compact_utc_and_round_trips() -> None:
    s = _s("2026-12-05T14:05", "2026-12-05T13:40", "2026-12-05T15:10", "2026-12-05T13:02")
    text = comment_text(s)
    assert text == "gpuhint:start=2026-12-05T14:05Z,band80=13:40Z..15:10Z,asof=13:02Z"
    assert not any(c.isspace() for c in text)  # scontrol's stdin would split or keep quotes
    assert parse_comment(text) == s


def test_other_days_are_written_in_full_and_seconds_round_to_the_minute() -> None:
    s = _s("2026-12-06T00:10", "2026-12-05T23:50", "2026-12-07T02:00", "2026-12-05T22:00")
    s = s._replace(expected=s.expected + 29, asof=s.asof + 31)
    text = comment_text(s)
    assert text == (
        "gpuhint:start=2026-12-06T00:10Z,band80=2026-12-05T23:50Z..2026-12-07T02:00Z,"
        "asof=2026-12-05T22:01Z"
    )
    back = parse_comment(text)
    assert back == s._replace(expected=s.expected - 29, asof=s.asof + 29)
    assert parse_comment("gpuhint:start=soon") is None
    assert parse_comment("my own note") is None


def test_only_an_empty_or_gpuhint_comment_is_ours() -> None:
    assert is_ours("") and is_ours("  ") and is_ours("gpuhint:start=...")
    assert not is_ours("my run, do not touch") and not is_ours("GPUHINT: x")


def _start(minute: int) -> Start:
    base = _t("2026-12-05T12:00")
    return Start(base + 60 * minute, base + 60 * (minute - 10), base + 60 * (minute + 20), base)


def test_plan_writes_changed_texts_keeps_user_comments_and_clears_stale_ones() -> None:
    minutes = {"1": 5, "2": 5, "3": 30, "4": 40, "5": 50, "6": 60, "9": 1}
    starts = {j: _start(m) for j, m in minutes.items()}
    jobs = [
        SlurmJob("1", "PENDING", comment=""),
        SlurmJob("2", "PENDING", comment=""),
        SlurmJob("3", "PENDING", comment="my own note"),  # a user's: never touched
        SlurmJob("4", "PENDING", comment=comment_text(_start(40))),  # unchanged
        SlurmJob("5", "PENDING", comment=comment_text(_start(45))),  # moved
        SlurmJob("6", "PENDING", held=True, comment=comment_text(_start(60))),  # held: cleared
        SlurmJob("7", "PENDING", comment=comment_text(_start(70))),  # no forecast: cleared
        SlurmJob("8", "PENDING", comment=""),  # no forecast, nothing to clear
        SlurmJob("9", "RUNNING", comment=""),  # not pending
        SlurmJob("10", "PENDING", comment=None),  # comment not read: left alone
    ]
    plan = plan_comments(jobs, {**starts, "10": _start(3)})
    assert [u.line for u in plan.updates] == [
        f"update jobid=1,2 Comment={comment_text(_start(5))}",
        f"update jobid=5 Comment={comment_text(_start(50))}",
        "update jobid=6,7 Comment=",
    ]
    assert (plan.set, plan.cleared, plan.unchanged, plan.user_kept) == (3, 2, 1, 1)


def test_plan_defers_the_latest_starts_first() -> None:
    jobs = [SlurmJob(str(i), "PENDING", comment="") for i in range(5)]
    plan = plan_comments(jobs, {str(i): _start(50 - i) for i in range(5)}, max_updates=2)
    assert [u.job_ids for u in plan.updates] == [("4",), ("3",)] and plan.deferred == 3


class _Slurm:
    def __init__(self, jobs: list[SlurmJob]) -> None:
        self.jobs = jobs
        self.batches: list[list[str]] = []

    def queue(self) -> list[SlurmJob]:
        return self.jobs

    def apply(self, lines: Sequence[str]) -> list[str]:
        self.batches.append(list(lines))
        return []


class _Hints:
    def __init__(self, starts: dict[str, Start], alive: float) -> None:
        self._starts, self.alive, self.fail = starts, alive, False

    def priorities(self, cluster: str) -> dict[str, float]:
        return self.snapshot(cluster).priorities

    def snapshot(self, cluster: str) -> HintSnapshot:
        if self.fail:
            raise ConnectionError("redis down")
        return HintSnapshot({j: 100.0 for j in self._starts}, self.alive)

    def starts(self, cluster: str) -> dict[str, Start]:
        return self._starts


def test_applier_writes_comments_after_factors_and_reports_them() -> None:
    now = _t("2026-12-05T12:00")
    slurm = _Slurm([SlurmJob(j, "PENDING", comment="") for j in ("1", "2")])
    hints = _Hints({"1": _start(5), "2": _start(9)}, now)
    kw = {"wall": lambda: now, "hint_errors": (ConnectionError,)}
    off = PriorityApplier(slurm, hints, "c", **kw).run_pass()  # type: ignore[arg-type]
    assert not off.start_comment and off.as_dict()["comments_set"] == 0
    assert all("Comment" not in ln for ln in off.lines)
    slurm.batches.clear()
    dry = PriorityApplier(slurm, hints, "c", dry_run=True, start_comment=True, **kw).run_pass()  # type: ignore[arg-type]
    assert dry.lines[-2:] == [
        f"update jobid=1 Comment={comment_text(_start(5))}",
        f"update jobid=2 Comment={comment_text(_start(9))}",
    ]
    assert dry.as_dict()["comments_set"] == 2 and dry.as_dict()["start_comment"] is True
    assert slurm.batches == []  # a dry run writes nothing
    a = PriorityApplier(slurm, hints, "c", start_comment=True, **kw)  # type: ignore[arg-type]
    r = a.run_pass()
    assert [ln for b in slurm.batches for ln in b] == r.lines
    assert "Comment=" in slurm.batches[-1][0] and "SiteFactor" in slurm.batches[0][0]
    assert r.as_dict()["comments_refused"] == 0 and r.updated == 2
    hints.fail = True  # Redis down: the last hints go on, the comments stay as they are
    slurm.batches.clear()
    cached = a.run_pass()
    assert cached.hints_from == "cache" and not cached.start_comment
    assert not any("Comment" in ln for b in slurm.batches for ln in b)


def test_comments_are_cleared_once_the_hints_faded_to_neutral() -> None:
    now = _t("2026-12-05T12:00")
    slurm = _Slurm([SlurmJob("1", "PENDING", comment=comment_text(_start(5)))])
    hints = _Hints({"1": _start(5)}, now - 10_000)  # no sign of life for 10,000 s
    fb = Fallback(stale_after_s=3600, fade_s=1800)
    a = PriorityApplier(slurm, hints, "c", fallback=fb, start_comment=True, wall=lambda: now)
    r = a.run_pass()
    assert r.lines[-1] == "update jobid=1 Comment=" and r.as_dict()["comments_cleared"] == 1


@pytest.mark.parametrize("comment", ["(null)", ""])
def test_squeue_null_comment_reads_as_empty(comment: str) -> None:
    from gpuhint.slurm.commands import SlurmCli

    class _Cli(SlurmCli):
        def run(self, argv: Sequence[str], *, check: bool = True, stdin: str | None = None) -> str:
            if argv[0] == "squeue":
                return f"7|7|100|{comment}\n8|8|100|a|b c\n"
            return ""

    jobs = _Cli().pending_jobs()
    assert [(j.job_id, j.comment) for j in jobs] == [("7", ""), ("8", "a|b c")]
