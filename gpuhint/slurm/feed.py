"""Slurm job events that survive an agent restart: a remembered watermark.

:class:`SlurmFeed` is the agent's Slurm source. After every poll it writes its
watermark to a small JSON file (atomically): the lifecycle step already published for
each job it still sees, and the time of that poll. On start it reads it back, so a
restarted agent

* publishes no duplicate: a job already announced ``submitted`` / ``started`` /
  ``finished`` is not announced again;
* misses no transition: with ``sacct`` it reads accounting from the last poll (minus a
  margin) up to now, so a job that started or finished while the agent was down is
  still seen, with its true times. A followed job the window leaves out (``sacct -S``
  lists a pending job only while it is eligible, so not while it is held) is looked up
  by id (``sacct -j``), so it is not taken for vanished. With ``squeue`` only jobs Slurm
  still lists are seen (it keeps finished ones for ``MinJobAge``, 300 s by default); a
  job that went missing meanwhile is published ``finished`` with state ``unknown``.

The watermark is written only once the events that lead to it are safe: the agent
calls ``durable()`` when its publisher holds nothing in memory (every event
acknowledged, or kept in ``--spill-dir``); a clean stop (SIGTERM) flushes them first.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from gpuhint.cores.job_tracker import JobTracker, SchedJob, SchedulerError, read_source
from gpuhint.cores.job_watermark import WatermarkedFeed
from gpuhint.slurm.fields import vc_name
from gpuhint.slurm.jobs import SQUEUE_CMD, VcFrom, parse_slurm
from gpuhint.wire.contract import JobState

SACCT_MARGIN_S = 300.0
"""How far before the last poll ``sacct`` reads again; a finished job is remembered as
long after its end, so a record listed again within the window is not announced twice."""


def sacct_command(window_s: float) -> tuple[str, ...]:
    """``sacct --json`` for every job in any state within the last ``window_s`` seconds."""
    secs = max(60, int(window_s) + 1)
    return ("sacct", "--json", "--allusers", "--allocations", "--starttime", f"now-{secs}")


LOOKUP_BATCH = 500
"""Job ids per ``sacct --jobs`` lookup of jobs the window left out."""

_VC_SOURCES = (
    ("partition", ("sinfo", "--noheader", "--format=%R")),
    ("account", ("sacctmgr", "--noheader", "--parsable2", "show", "account", "format=Account")),
)
"""Where the VC names rosters list come from (``vcs``): Slurm's partitions and accounts."""

SLURM_COMMANDS = ("squeue", "sacct")
"""The ``--slurm`` specs that name Slurm's own commands (anything else is cmd: or a file)."""

VC_LIST_TIMEOUT_S = 10.0
"""How long ``sinfo`` / ``sacctmgr`` may take to list the VC names (once a roster)."""

log = logging.getLogger(__name__)


def sacct_lookup(job_ids: Sequence[str]) -> tuple[str, ...]:
    """``sacct --json`` for the given jobs, whatever their state or eligibility."""
    return ("sacct", "--json", "--allusers", "--allocations", "--jobs", ",".join(job_ids))


@dataclass
class SlurmFeed(WatermarkedFeed):
    """The agent's Slurm feed: ``squeue`` / ``sacct`` / a file, with a watermark file.

    ``spec`` is ``sacct`` (accounting window from the watermark), ``squeue``, ``cmd:...``
    or a file path. ``state_path`` None keeps no watermark (a restart starts fresh); a
    watermark naming no feed (written before feeds were named) is a Slurm one.
    """

    kind: str = "slurm"
    untagged: bool = True
    spec: str = "sacct"
    vc_from: VcFrom = "account"
    lookback_s: float = 3600.0
    margin_s: float = SACCT_MARGIN_S
    accept: Callable[[str], bool] | None = None  # job ids to follow (None: all)
    _vc_warned: set[str] = field(default_factory=set, repr=False)

    def command(self, now: float) -> str | Sequence[str]:
        if self.spec == "sacct":
            since = self.last_poll - self.margin_s if self.last_poll else now - self.lookback_s
            return sacct_command(now - since)
        if self.spec == "squeue":
            return SQUEUE_CMD
        return self.spec

    def named_source(self) -> str:
        """``squeue`` and ``sacct`` are Slurm's commands, not files."""
        return self.spec if self.spec in SLURM_COMMANDS else super().named_source()

    def identity(self) -> str:
        """The source (its ``spec``), the VC mapping and the Slurm configuration it reads
        (``SLURM_CONF``)."""
        conf = os.environ.get("SLURM_CONF", "")
        return f"{super().identity()}|{self.vc_from}|{conf}"

    def vcs(self) -> list[str]:
        """Every partition and (VCs by account) every account Slurm defines, named as
        jobs' VCs are: an empty one is rostered too. A source that is a file has none;
        a command that fails (no slurmdbd for ``sacctmgr``) is logged once and skipped."""
        if self.spec not in SLURM_COMMANDS and not self.spec.startswith("cmd:"):
            return []
        names: set[str] = set()
        for what, argv in _VC_SOURCES:
            if what == "account" and self.vc_from == "partition":
                continue
            try:  # a short timeout: a hung slurmdbd must not stall the agent's loop long
                text = read_source(argv, timeout_s=min(self.timeout_s, VC_LIST_TIMEOUT_S))
            except SchedulerError as exc:
                if what not in self._vc_warned:  # once per outage
                    self._vc_warned.add(what)
                    log.warning("slurm: cannot list the %ss for rosters: %s", what, exc)
                continue
            if what in self._vc_warned:
                self._vc_warned.discard(what)
                log.warning("slurm: the %ss are listed again for rosters", what)
            names.update(vc_name(n.strip(), None) for n in text.splitlines() if n.strip())
        return sorted(names)

    def lists_every_unfinished_job(self) -> bool:
        """sacct's window leaves out pending jobs that are not eligible (held, a begin
        time, a dependency); only those its tracker knows are looked up: without a
        watermark, a restarted agent does not know the ones announced before."""
        return self.spec != "sacct" or self.state_path is not None

    def _read(self, now: float) -> list[SchedJob]:
        text = read_source(self.command(now), timeout_s=self.timeout_s)
        jobs = parse_slurm(text, self.vc_from)
        if self.accept is not None:
            jobs = [j for j in jobs if self.accept(j.job_id)]
        return jobs + self._unlisted(jobs) if self.spec == "sacct" else jobs

    def _unlisted(self, listed: list[SchedJob]) -> list[SchedJob]:
        """The followed pending or running jobs the sacct window left out, as
        ``sacct -j`` shows them: the window lists a pending job only while it is
        eligible, so a held job (or one whose begin time moved) drops out of it and
        comes back when released; it must stay pending, not vanish. A pending array
        task not split off yet is found under its array's id."""
        seen = {j.job_id for j in listed}
        missing = {jid for jid, step in self.tracker._step.items() if step < 2} - seen
        ids = sorted({jid.split("_")[0] for jid in missing})
        found: list[SchedJob] = []
        for i in range(0, len(ids), LOOKUP_BATCH):
            text = read_source(sacct_lookup(ids[i : i + LOOKUP_BATCH]), timeout_s=self.timeout_s)
            found += [j for j in parse_slurm(text, self.vc_from) if j.job_id in missing]
        return found


def slurm_feed(
    spec: str,
    *,
    cluster: str,
    state_path: Path | None = None,
    vc_from: VcFrom = "account",
    lookback_s: float = 3600.0,
) -> SlurmFeed:
    """A :class:`SlurmFeed` for ``gpuhint agent --slurm SPEC``."""
    return SlurmFeed(
        name="slurm",
        source=spec,
        parse=lambda text: parse_slurm(text, vc_from),
        tracker=JobTracker(
            cluster=cluster,
            vanished_state=JobState.UNKNOWN,
            keep_finished_s=SACCT_MARGIN_S,
            vanish_after=2 if spec == "sacct" else 1,
        ),
        spec=spec,
        state_path=state_path,
        vc_from=vc_from,
        lookback_s=lookback_s,
    )
