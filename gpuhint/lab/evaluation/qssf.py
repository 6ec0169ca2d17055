"""QSSF on a real trace: the online predictor's hints, then every policy in the simulator.

1. Closed loop (the default): each VC's QSSF run drives a live predictor inside the
   simulation (:class:`ClosedLoopRanker`): a job is predicted when it arrives, the
   model learns from each job when it ends *in the simulated schedule*, and the waiting
   jobs a finished job bears on are re-ranked (hint updates), as a deployment would.
   Open loop (``loop="open"``, the artifact's way): the trace's own events go through
   :class:`gpuhint.cores.qssf.HintEngine` (learn at the trace's finish times) and each job
   keeps the priority of the hint written at its submit.
2. Each VC is simulated (``models.simulator``) under FIFO, SJF, SRTF, the QSSF oracle
   (true GPUs x duration), QSSF with those hints, and QSSF with given priorities.
3. Each policy is summarized by averages and percentiles and by its tails (max / p99
   wait, p99 bounded slowdown, share of jobs over 2x / 10x their FIFO JCT:
   :func:`models.simulator.metrics.tail_stats`); the QSSF hints at submit are scored
   against the true durations (80% band coverage, share off by 2x: :class:`BandStats`).

No printing here: the CLI (``gpuhint/cli/evaluate_qssf.py``) formats the report.
"""

from __future__ import annotations

import csv
import math
import time
from collections import defaultdict, deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from gpuhint.cores.sink import BufferedStore, Op, PutStarts
from gpuhint.lab.evaluation.starts import StartRecorder, start_accuracy
from gpuhint.lab.traces.readers import TraceJob
from gpuhint.wire.contract import ClusterLoad, PowerAdvisory, PriorityHint, StartForecasts
from models.simulator import (
    PolicyKind,
    SimJob,
    Summary,
    simulate_vc,
    size_vcs,
    summarize,
)
from models.simulator.easy import simulate_easy
from models.simulator.metrics import Tails, tail_stats

Loop = Literal["closed", "open"]


GPUS_PER_NODE = 8

Progress = Callable[[str], None]


class InputError(ValueError):
    """A bad line in a side file (VC sizes, priorities): ``path:line: reason``."""

    def __init__(self, path: str, line: int, reason: str) -> None:
        super().__init__(f"{path}:{line}: {reason}" if line else f"{path}: {reason}")


def _open_csv_rows(path: str | Path) -> list[tuple[int, list[str]]]:
    p = Path(path)
    try:
        with open(p, encoding="utf-8", newline="") as fh:
            reader = csv.reader(fh)
            return [(reader.line_num, row) for row in reader]
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise InputError(str(p), 0, str(exc)) from None


def read_vc_config(path: str | Path) -> dict[str, int]:
    """Nodes per VC from a two-column CSV with a header (``vc,nodes``; the artifact's
    ``,num`` files read as they are).

    >>> import tempfile, os
    >>> f = tempfile.NamedTemporaryFile("w", suffix=".csv", delete=False)
    >>> _ = f.write(",num\\nvcA,20\\nvcB,2\\n"); f.close()
    >>> read_vc_config(f.name)
    {'vcA': 20, 'vcB': 2}
    >>> os.unlink(f.name)
    """
    rows = _open_csv_rows(path)
    if not rows:
        raise InputError(str(path), 1, "empty file: expected a header then vc,nodes rows")
    sizes: dict[str, int] = {}
    for line, row in rows[1:]:
        if not row or all(not c.strip() for c in row):
            continue
        if len(row) < 2:
            raise InputError(str(path), line, f"expected vc,nodes, got {','.join(row)!r}")
        vc, raw = row[0].strip(), row[1].strip()
        if not vc:
            raise InputError(str(path), line, "missing VC name")
        try:
            nodes = int(raw)
        except ValueError:
            raise InputError(
                str(path), line, f"nodes must be a whole number, got {raw!r}"
            ) from None
        if nodes < 0:
            raise InputError(str(path), line, f"nodes must be >= 0, got {nodes}")
        if vc in sizes:
            raise InputError(str(path), line, f"VC {vc!r} listed twice")
        sizes[vc] = nodes
    return sizes


def read_priorities(path: str | Path) -> dict[str, float]:
    """``job_id,priority`` (header required; other columns ignored); smaller runs first."""
    rows = _open_csv_rows(path)
    if not rows:
        raise InputError(str(path), 1, "empty file: expected a job_id,priority header")
    header = [c.strip().lower() for c in rows[0][1]]
    if "job_id" not in header or "priority" not in header:
        raise InputError(
            str(path), rows[0][0], f"header must name job_id and priority, got {rows[0][1]!r}"
        )
    ji, pi = header.index("job_id"), header.index("priority")
    out: dict[str, float] = {}
    for line, row in rows[1:]:
        if not row or all(not c.strip() for c in row):
            continue
        if len(row) <= max(ji, pi):
            raise InputError(
                str(path), line, f"{len(row)} fields where the header has {len(header)}"
            )
        job_id, raw = row[ji].strip(), row[pi].strip()
        if not job_id:
            raise InputError(str(path), line, "missing job_id")
        try:
            prio = float(raw)
        except ValueError:
            raise InputError(str(path), line, f"priority is not a number: {raw!r}") from None
        if not math.isfinite(prio):
            raise InputError(str(path), line, f"priority must be finite, got {raw!r}")
        if job_id in out:
            raise InputError(str(path), line, f"job {job_id!r} listed twice")
        out[job_id] = prio
    return out


@dataclass
class OnlinePredictions:
    """Each job's hint priority (GPUs x expected duration) at its submit, by trace index."""

    priority: list[float]
    predicted_duration: list[float]
    model: str
    model_version: str
    events: int
    seconds: float
    mae_log: float | None
    median_abs_pct_error: float | None
    scored: int
    hint_updates: int = 0
    # the hint's 80% band at submit (NaN where the model gives none) and its priority
    # then (``priority`` is the latest one: hint updates move it), by trace index
    p10: list[float] = field(default_factory=list)
    p90: list[float] = field(default_factory=list)
    submit_priority: list[float] = field(default_factory=list)


def predict_online(
    jobs: Sequence[TraceJob], model_name: str, cluster: str = "eval"
) -> OnlinePredictions:
    """Replay ``jobs`` through the hint core as the worker would; keep each job's hint."""
    from functools import partial

    from gpuhint.cores.qssf import HintEngine
    from gpuhint.cores.sink import InMemoryStore
    from gpuhint.lab.traces.readers import job_events
    from models.registry import make_model

    model = make_model(model_name)  # for its name and version; each VC gets its own
    engine = HintEngine(partial(make_model, model_name), InMemoryStore(), clock=lambda: 0.0)
    pending: dict[str, deque[int]] = defaultdict(deque)
    for k, j in enumerate(jobs):
        pending[j.job_id].append(k)
    priority = [math.nan] * len(jobs)
    predicted = [math.nan] * len(jobs)
    p10 = [math.nan] * len(jobs)
    p90 = [math.nan] * len(jobs)
    events = job_events(jobs, cluster=cluster)
    t0 = time.perf_counter()
    for ev in events:
        hint = engine.on_job_event(ev)
        if hint is not None:
            k = pending[ev.job_id].popleft()
            priority[k] = hint.priority
            predicted[k] = hint.predicted_duration_s
            p10[k], p90[k] = _band(hint)
    engine.store.flush()
    s = engine.stats
    return OnlinePredictions(
        priority=priority,
        predicted_duration=predicted,
        model=model.name,
        model_version=model.version,
        events=len(events),
        seconds=time.perf_counter() - t0,
        mae_log=s.mae_log,
        median_abs_pct_error=s.median_abs_pct_error,
        scored=s.scored,
        p10=p10,
        p90=p90,
        submit_priority=list(priority),
    )


def _band(hint: PriorityHint) -> tuple[float, float]:
    """The hint's 80% band (p10, p90); NaN where the model gives none."""
    lo, hi = hint.duration_p10_s, hint.duration_p90_s
    return (math.nan if lo is None else lo, math.nan if hi is None else hi)


class _DiscardStore(BufferedStore):
    """A sink that applies nothing: the simulator reads the engine's updates directly."""

    def _apply(self, ops: list[Op]) -> None:
        return None

    def get_hint(self, cluster: str, job_id: str) -> PriorityHint | None:
        return None

    def queue(self, cluster: str, vc: str) -> list[tuple[str, float]]:
        return []

    def get_advisory(self, cluster: str, node: str | None = None) -> PowerAdvisory | None:
        return None

    def get_load(self, cluster: str) -> ClusterLoad | None:
        return None

    def counters(self) -> dict[str, int]:
        return {}


class _StartCatcher(_DiscardStore):
    """Discards every write but the expected-start forecasts, which it keeps."""

    def __init__(self) -> None:
        super().__init__()
        self.caught: list[StartForecasts] = []

    def _apply(self, ops: list[Op]) -> None:
        self.caught.extend(op.starts for op in ops if isinstance(op, PutStarts))


class ClosedLoopRanker:
    """One VC's live predictor inside the simulator (:class:`models.simulator.Ranker`).

    It drives the hint core with events of the *simulated* schedule: submitted when a
    job arrives, started when the simulator starts it, finished (with its true
    duration) when it ends there; hint updates of waiting jobs go back to the
    simulator as new priorities.
    """

    def __init__(
        self,
        jobs: Sequence[TraceJob],
        model_name: str,
        cluster: str = "eval",
        snapshot_at: float = math.inf,
        wait_bound: float | None = None,
    ) -> None:
        from gpuhint.cores.qssf import HintEngine
        from models.registry import DURATION_MODELS, make_model
        from models.wait_bound import DEFAULT_WAIT_BOUND

        make_model(model_name)  # a clear error for an unknown name
        self.jobs = jobs
        self.store = _StartCatcher()
        self.engine = HintEngine(
            DURATION_MODELS[model_name],
            self.store,
            clock=lambda: 0.0,
            wait_bound=DEFAULT_WAIT_BOUND if wait_bound is None else wait_bound,
        )
        self._held: list[tuple[int, float]] = []  # updates of submits and starts
        self.starts = StartRecorder(
            {j.job_id: k for k, j in enumerate(jobs)},
            [j.num_gpus for j in jobs],
            [j.time_limit_s for j in jobs],
        )
        self.snapshot_at = snapshot_at
        self.snapshot: list[tuple[float, int]] | None = None  # (priority, job) waiting then
        self.snapshot_t = math.nan
        self._since_snapshot = 0
        self.cluster = cluster
        self.model_name = model_name
        self.index_of = {j.job_id: k for k, j in enumerate(jobs)}
        self.priority: list[float] = [math.nan] * len(jobs)
        self.predicted: list[float] = [math.nan] * len(jobs)  # at submit
        self.p10: list[float] = [math.nan] * len(jobs)  # the band at submit
        self.p90: list[float] = [math.nan] * len(jobs)
        self.submit_priority: list[float] = [math.nan] * len(jobs)
        self.hint_updates = 0
        self.model_version = ""
        self.events = 0
        self.seconds = 0.0

    def _event(self, i: int, phase: str, t: float) -> Any:
        from gpuhint.wire.contract import JobEvent

        j = self.jobs[i]
        extra: dict[str, Any] = {}
        if phase != "submitted":
            extra["start_time"] = t if phase == "started" else t - j.duration
        if phase == "finished":
            extra["duration_s"] = j.duration
            extra["state"] = j.state
        self.events += 1
        return JobEvent(
            phase=phase,  # type: ignore[arg-type]
            job_id=j.job_id,
            cluster=self.cluster,
            vc=j.vc,
            user=j.user,
            name=j.name,
            num_gpus=j.num_gpus,
            num_cpus=j.num_cpus,
            num_nodes=j.num_nodes,
            time_limit_s=j.time_limit_s,
            submit_time=j.submit_time,
            time=t,
            **extra,
        )

    def _maybe_snapshot(self, t: float) -> None:
        """Keep the queue as it was at the last event up to ``snapshot_at`` that found
        jobs waiting (refreshed at most every 32 events: bounded cost)."""
        waiting = self._waiting()
        if t > self.snapshot_at or not waiting:
            return
        self._since_snapshot += 1
        if self.snapshot is not None and self._since_snapshot < 32:
            return
        self._since_snapshot = 0
        self.snapshot_t = t
        self.snapshot = sorted(
            (self.priority[self.index_of[jid]], self.index_of[jid]) for jid in waiting
        )

    def _waiting(self) -> dict[str, Any]:
        if not self.jobs:
            return {}
        from gpuhint.cores.qssf import state_key

        st = self.engine.states.get(state_key(self.cluster, self.jobs[0].vc))
        return st.pending if st is not None else {}

    def _record_starts(self) -> None:
        """Keep the forecasts the engine just published (flushed into the catcher)."""
        self.store.flush()
        if not self.store.caught:
            return
        from gpuhint.cores.qssf import state_key

        for f in self.store.caught:
            st = self.engine.states.get(state_key(f.cluster, f.vc))
            self.starts.record(f, None if st is None else st.starts)
        self.store.caught.clear()

    def submit(self, i: int, t: float) -> float:
        self._maybe_snapshot(t)
        t0 = time.perf_counter()
        hint = self.engine.on_job_event(self._event(i, "submitted", t))
        self.seconds += time.perf_counter() - t0
        self._record_starts()
        assert hint is not None
        self._hold()
        self.priority[i] = hint.priority
        self.predicted[i] = hint.predicted_duration_s
        self.p10[i], self.p90[i] = _band(hint)
        self.submit_priority[i] = hint.priority
        self.model_version = hint.model_version
        return hint.priority

    def start(self, i: int, t: float) -> None:
        t0 = time.perf_counter()
        self.engine.on_job_event(self._event(i, "started", t))
        self.seconds += time.perf_counter() - t0
        self._record_starts()
        self._hold()

    def _hold(self) -> None:
        """Keep the hint updates of a submit or a start (jobs the starvation bound moved)
        for the next finish: the simulator applies updates there."""
        for h in self.engine.updates:
            k = self.index_of[h.job_id]
            self.priority[k] = h.priority
            self._held.append((k, h.priority))

    def finish(self, i: int, t: float) -> list[tuple[int, float]]:
        self._maybe_snapshot(t)
        t0 = time.perf_counter()
        self.engine.on_job_event(self._event(i, "finished", t))
        updates = self.engine.updates
        self.seconds += time.perf_counter() - t0
        self._record_starts()
        self.hint_updates += len(updates)
        out = [(self.index_of[h.job_id], h.priority) for h in updates]
        for k, p in out:
            self.priority[k] = p
        if self._held:
            self.hint_updates += len(self._held)
            out = self._held + out
            self._held = []
        return out

    def summary(self) -> OnlinePredictions:
        s = self.engine.stats
        return OnlinePredictions(
            priority=self.priority,
            predicted_duration=self.predicted,
            model=self.model_name,
            model_version=self.model_version,
            events=self.events,
            seconds=self.seconds,
            mae_log=s.mae_log,
            median_abs_pct_error=s.median_abs_pct_error,
            scored=s.scored,
            hint_updates=self.hint_updates,
            p10=self.p10,
            p90=self.p90,
            submit_priority=self.submit_priority,
        )


@dataclass(frozen=True)
class PolicySpec:
    name: str
    kind: PolicyKind
    describe: str
    priority: str | None = None  # "oracle" | "online" | "given" | "loop" | "limit"
    backfill: bool = False
    easy: bool = False  # EASY backfill with the requested time limits (models.simulator.easy)


@dataclass
class PolicyResult:
    spec: PolicySpec
    summary: Summary
    jct: list[float]
    seconds: float
    wait: list[float] = field(default_factory=list)  # start - submit, aligned with jct
    tails: Tails | None = None

    def as_dict(self) -> dict[str, Any]:
        """The policy's JSON object: description, summary, then the tails (added keys)."""
        out: dict[str, Any] = {"description": self.spec.describe, **self.summary.as_dict()}
        if self.tails is not None:
            out.update(self.tails.as_dict())
        return out


@dataclass(frozen=True)
class BandStats:
    """How the QSSF hints written at submit compare with the true durations.

    ``band_coverage``: share of jobs whose true duration lies in the hint's 80% band
    [p10, p90] (over ``band_jobs``: the jobs whose hint has a band). ``share_off_2x``:
    share whose point forecast (``predicted_duration_s``) is off from the true duration
    by a factor of 2 or more either way; ``share_off_2x_expected`` the same for the
    expected duration the priority ranks by (priority / GPUs). Both over ``jobs``, with
    durations floored at 1 s so a 0-second job is not infinitely far off.
    """

    jobs: int
    band_jobs: int
    band_coverage: float
    share_off_2x: float
    share_off_2x_expected: float

    @staticmethod
    def empty() -> dict[str, Any]:
        return dict.fromkeys(
            ("band_coverage", "band_jobs", "share_off_2x", "share_off_2x_expected")
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "band_coverage": self.band_coverage,
            "band_jobs": self.band_jobs,
            "share_off_2x": self.share_off_2x,
            "share_off_2x_expected": self.share_off_2x_expected,
        }


def _off_2x(predicted: float, true: float) -> bool:
    a, b = max(predicted, 1.0), max(true, 1.0)
    return max(a, b) >= 2.0 * min(a, b)


def band_stats(
    true: Sequence[float],
    predicted: Sequence[float],
    expected: Sequence[float],
    p10: Sequence[float],
    p90: Sequence[float],
) -> BandStats:
    """Score per-job predictions (one order; NaN: no prediction / no band).

    >>> b = band_stats([100, 10, 50], [90, 30, 50], [120, 10, 200], [50, 1, 60], [200, 5, 90])
    >>> b.band_coverage, b.share_off_2x, b.share_off_2x_expected
    (0.3333333333333333, 0.3333333333333333, 0.3333333333333333)
    """
    jobs = band = inside = off = off_exp = 0
    for t, p, e, lo, hi in zip(true, predicted, expected, p10, p90, strict=True):
        if math.isnan(p):
            continue
        jobs += 1
        off += _off_2x(p, t)
        off_exp += _off_2x(e if not math.isnan(e) else p, t)
        if not (math.isnan(lo) or math.isnan(hi)):
            band += 1
            inside += lo <= t <= hi
    return BandStats(
        jobs=jobs,
        band_jobs=band,
        band_coverage=inside / band if band else math.nan,
        share_off_2x=off / jobs if jobs else math.nan,
        share_off_2x_expected=off_exp / jobs if jobs else math.nan,
    )


@dataclass
class QssfReport:
    jobs_total: int
    jobs_simulated: int
    jobs_without_gpus: int
    vc_sizes: dict[str, int]
    vc_sizing: dict[str, str]
    target_load: float
    predictions: OnlinePredictions
    policies: dict[str, PolicyResult]
    given: dict[str, Any] | None = None
    seconds: dict[str, float] = field(default_factory=dict)
    loop: Loop = "closed"
    band: BandStats | None = None  # the qssf policy's hints at submit vs true durations
    expected_start: dict[str, Any] | None = None  # the closed loop's forecasts vs its starts
    wait_bound: float | None = None  # the starvation bound's factor (closed loop; 0: off)
    overdue: int = 0  # waiting jobs the bound moved to the front (qssf, closed loop)

    def avg(self, name: str) -> float:
        return self.policies[name].summary.avg_jct_s

    def ratio(self, num: str, den: str) -> float | None:
        if num not in self.policies or den not in self.policies:
            return None
        d = self.avg(den)
        return self.avg(num) / d if d > 0 else None

    def as_dict(self) -> dict[str, Any]:
        p = self.predictions
        return {
            "jobs": self.jobs_total,
            "jobs_simulated": self.jobs_simulated,
            "jobs_without_gpus": self.jobs_without_gpus,
            "vc_sizes": dict(self.vc_sizes),
            "vc_sizing": dict(self.vc_sizing),
            "target_load": self.target_load,
            "gpus_per_node": GPUS_PER_NODE,
            "model": p.model,
            "model_version": p.model_version,
            "mae_log": p.mae_log,
            "median_abs_pct_error": p.median_abs_pct_error,
            "jobs_scored": p.scored,
            "policies": {name: r.as_dict() for name, r in self.policies.items()},
            "loop": self.loop,
            "hint_updates": p.hint_updates,
            "jct_ratio_fifo_over_qssf": self.ratio("fifo", "qssf"),
            "jct_ratio_qssf_over_fifo": self.ratio("qssf", "fifo"),
            "jct_ratio_qssf_over_sjf": self.ratio("qssf", "sjf"),
            "jct_ratio_qssf_over_oracle": self.ratio("qssf", "qssf-oracle"),
            "given_priorities": self.given,
            "seconds": {k: round(v, 3) for k, v in self.seconds.items()},
            # the qssf policy's hints as written at submit (band_coverage, band_jobs,
            # share_off_2x, share_off_2x_expected): top level, beside mae_log
            **(self.band.as_dict() if self.band is not None else BandStats.empty()),
            "expected_start": self.expected_start,
            "wait_bound": self.wait_bound,
            "overdue": self.overdue,
        }


def policy_specs(
    given: bool, backfill: bool, loop: Loop = "open", limits: bool = False
) -> list[PolicySpec]:
    specs = [
        PolicySpec("fifo", "fifo", "first in, first out"),
        PolicySpec("sjf", "sjf", "shortest true duration first (oracle)"),
        PolicySpec("srtf", "srtf", "shortest true remaining time first, preemptive (oracle)"),
        PolicySpec(
            "qssf-oracle", "qssf", "shortest true service (GPUs x duration) first", "oracle"
        ),
        PolicySpec(
            "qssf",
            "qssf",
            "QSSF with gpuhint's online hints"
            + (" (closed loop: learns and re-ranks in this schedule)" if loop == "closed" else ""),
            "loop" if loop == "closed" else "online",
        ),
    ]
    if given:
        specs.append(PolicySpec("qssf-given", "qssf", "QSSF with the given priorities", "given"))
    if limits:  # what a site can run without gpuhint: the users' requested time limits
        specs += [
            PolicySpec(
                "sjf-limit",
                "qssf",
                "shortest requested service first (GPUs x requested time limit)",
                "limit",
            ),
            PolicySpec(
                "fifo+easy",
                "fifo",
                "FIFO with EASY backfill on the requested time limits (Slurm's backfill)",
                easy=True,
            ),
        ]
    if backfill:
        specs += [
            PolicySpec(
                f"{s.name}+backfill", s.kind, f"{s.describe}, with backfill", s.priority, True
            )
            for s in list(specs)
            if s.kind != "srtf" and not s.easy
        ]
    return specs


def _check_fit(
    jobs: Sequence[TraceJob], sizes: Mapping[str, int], sized: Mapping[str, str]
) -> None:
    for j in jobs:
        cap = sizes[j.vc] * GPUS_PER_NODE
        if j.num_gpus > cap:
            raise InputError(
                "VC config",
                0,
                f"job {j.job_id} (trace line {j.line}) needs {j.num_gpus} GPUs but VC "
                f"{j.vc!r} has {sizes[j.vc]} nodes ({cap} GPUs, {sized[j.vc]}): it could "
                "never run; give the VC more nodes",
            )


def evaluate_qssf(
    jobs: Sequence[TraceJob],
    *,
    model: str,
    vc_nodes: Mapping[str, int] | None = None,
    target_load: float = 0.9,
    given_priorities: Mapping[str, float] | None = None,
    given_times_gpus: bool = False,
    backfill: bool = False,
    loop: Loop = "closed",
    progress: Progress | None = None,
    wait_bound: float | None = None,
) -> QssfReport:
    """Run the online predictor over ``jobs`` and simulate every policy on each VC.

    ``loop="closed"``: the QSSF runs learn and re-rank inside the simulated schedule
    (module docstring); ``"open"``: hints from the trace's own timeline.
    ``wait_bound``: the starvation bound's factor in the closed loop (None: the
    default, :data:`models.wait_bound.DEFAULT_WAIT_BOUND`; 0: off).
    """
    from models.wait_bound import DEFAULT_WAIT_BOUND

    bound = DEFAULT_WAIT_BOUND if wait_bound is None else wait_bound
    overdue = 0
    say = progress or (lambda _msg: None)
    t_start = time.perf_counter()
    preds: OnlinePredictions | None = None
    if loop == "open":
        say(
            f"predicting with {model!r} over {len(jobs):,} jobs "
            "(open loop: predict at submit, learn at the trace's finish times)"
        )
        preds = predict_online(jobs, model)
        say(f"  {preds.events:,} events in {preds.seconds:.2f} s")

    gpu_idx = [k for k, j in enumerate(jobs) if j.num_gpus > 0]
    by_vc: dict[str, list[int]] = defaultdict(list)
    for k in gpu_idx:
        by_vc[jobs[k].vc].append(k)
    if not gpu_idx:
        raise InputError("trace", 0, "no job asks for a GPU: nothing to schedule")

    sizing: dict[str, str] = {}
    sizes: dict[str, int] = {}
    to_size = [vc for vc in by_vc if vc_nodes is None or vc not in vc_nodes]
    load_sizes: dict[str, int] = {}
    if to_size:
        load_sizes = size_vcs(
            {
                vc: [(jobs[k].submit_time, jobs[k].duration, jobs[k].num_gpus) for k in ks]
                for vc, ks in by_vc.items()
            },
            target_load,
            GPUS_PER_NODE,
        )
    for vc in sorted(by_vc):
        if vc_nodes is not None and vc in vc_nodes:
            sizes[vc], sizing[vc] = vc_nodes[vc], "given"
        else:
            sizes[vc], sizing[vc] = load_sizes[vc], f"sized to load {target_load:g}"
    _check_fit([jobs[k] for k in gpu_idx], sizes, sizing)

    given_info = None
    given_prio: list[float] = []
    if given_priorities is not None:
        missing = 0
        for j in jobs:
            p = given_priorities.get(j.job_id)
            if p is None:
                if j.num_gpus > 0:
                    missing += 1
                given_prio.append(math.inf)
            else:
                given_prio.append(p * j.num_gpus if given_times_gpus else p)
        given_info = {
            "missing": missing,
            "missing_treatment": "ranked after every job that has a priority "
            "(among themselves: fewer GPUs first, then submit order)",
            "times_gpus": given_times_gpus,
        }

    sim_jobs = {vc: [_sim_job(jobs[k]) for k in ks] for vc, ks in by_vc.items()}
    loop_preds: dict[str, tuple[list[int], OnlinePredictions]] = {}
    prio_sources: dict[str, list[float]] = {
        "oracle": [j.num_gpus * j.duration for j in jobs],
        "online": preds.priority if preds is not None else [],
        "given": given_prio,
        "limit": [j.num_gpus * j.time_limit_s if j.time_limit_s else math.inf for j in jobs],
    }
    has_limits = any(jobs[k].time_limit_s for k in gpu_idx)
    results: dict[str, PolicyResult] = {}
    start_runs: list[tuple[list[float], list[float], StartRecorder]] = []
    for spec in policy_specs(given_priorities is not None, backfill, loop, has_limits):
        t0 = time.perf_counter()
        gpus: list[int] = []
        jct: list[float] = []
        queue: list[float] = []
        wait: list[float] = []
        for vc, ks in by_vc.items():
            sj = sim_jobs[vc]
            prios = None
            ranker: ClosedLoopRanker | None = None
            if spec.priority == "loop":
                ranker = ClosedLoopRanker([jobs[k] for k in ks], model, wait_bound=bound)
            elif spec.priority is not None:
                src = prio_sources[spec.priority]
                prios = [src[k] for k in ks]
            if spec.easy:
                lims = [jobs[k].time_limit_s or None for k in ks]
                out = simulate_easy(sj, sizes[vc], [j.submit for j in sj], lims)
            else:
                out = simulate_vc(
                    sj,
                    sizes[vc],
                    spec.kind,
                    priorities=prios,
                    ranker=ranker,
                    backfill=spec.backfill,
                )
            if ranker is not None and not spec.backfill:
                loop_preds[vc] = (ks, ranker.summary())
                start_runs.append(([j.submit for j in sj], [o.start for o in out], ranker.starts))
                overdue += ranker.engine.stats.overdue
            for job, o in zip(sj, out, strict=True):
                gpus.append(job.gpus)
                jct.append(o.end - job.submit)
                queue.append(o.queue)
                wait.append(o.start - job.submit)
        secs = time.perf_counter() - t0
        results[spec.name] = PolicyResult(spec, summarize(gpus, jct, queue), jct, secs, wait=wait)
        say(f"  simulated {spec.name:<22} {secs:6.2f} s")
    # tails: per job, in the order every policy appended (VC by VC, trace order within)
    durations = [jobs[k].duration for ks in by_vc.values() for k in ks]
    fifo_jct = results["fifo"].jct
    for r in results.values():
        r.tails = tail_stats(r.wait, r.jct, durations, fifo_jct)
    if preds is None:
        preds = _merge_predictions(len(jobs), list(loop_preds.values()), model)
    band = _score_hints(jobs, gpu_idx, preds)
    total = time.perf_counter() - t_start
    return QssfReport(
        jobs_total=len(jobs),
        jobs_simulated=len(gpu_idx),
        jobs_without_gpus=len(jobs) - len(gpu_idx),
        vc_sizes=sizes,
        vc_sizing=sizing,
        target_load=target_load,
        predictions=preds,
        policies=results,
        given=given_info,
        seconds={
            "predict": preds.seconds,
            "simulate": sum(r.seconds for r in results.values()),
            "total": total,
        },
        loop=loop,
        band=band,
        expected_start=start_accuracy(start_runs) if start_runs else None,
        wait_bound=bound if loop == "closed" else None,
        overdue=overdue,
    )


def _score_hints(
    jobs: Sequence[TraceJob], idx: Sequence[int], preds: OnlinePredictions
) -> BandStats:
    """The scheduled jobs' hints at submit (band, point forecast, expected duration =
    priority at submit / GPUs) against their true durations."""

    def at(xs: list[float]) -> list[float]:
        return [xs[k] for k in idx] if xs else [math.nan] * len(idx)

    return band_stats(
        [jobs[k].duration for k in idx],
        at(preds.predicted_duration),
        [p / max(jobs[k].num_gpus, 1) for p, k in zip(at(preds.submit_priority), idx, strict=True)],
        at(preds.p10),
        at(preds.p90),
    )


def _merge_predictions(
    n: int, per_vc: list[tuple[list[int], OnlinePredictions]], model: str
) -> OnlinePredictions:
    """One summary of the closed-loop predictors of every VC (errors weighted by jobs;
    priorities and predictions back in trace order, NaN for jobs not scheduled)."""
    priority = [math.nan] * n
    predicted = [math.nan] * n
    p10 = [math.nan] * n
    p90 = [math.nan] * n
    submit_priority = [math.nan] * n
    for ks, p in per_vc:
        for pos, k in enumerate(ks):
            priority[k] = p.priority[pos]
            predicted[k] = p.predicted_duration[pos]
            if p.p10:
                p10[k], p90[k] = p.p10[pos], p.p90[pos]
                submit_priority[k] = p.submit_priority[pos]
    parts = [p for _, p in per_vc]
    scored = sum(p.scored for p in parts)
    mae = sum((p.mae_log or 0.0) * p.scored for p in parts) / scored if scored else None
    meds = [p.median_abs_pct_error for p in parts if p.median_abs_pct_error is not None]
    return OnlinePredictions(
        priority=priority,
        predicted_duration=predicted,
        model=parts[0].model if parts else model,
        model_version=parts[0].model_version if parts else "",
        events=sum(p.events for p in parts),
        seconds=sum(p.seconds for p in parts),
        mae_log=mae,
        median_abs_pct_error=sorted(meds)[len(meds) // 2] if meds else None,
        scored=scored,
        hint_updates=sum(p.hint_updates for p in parts),
        p10=p10,
        p90=p90,
        submit_priority=submit_priority,
    )


def _sim_job(j: TraceJob) -> SimJob:
    return SimJob(j.job_id, j.submit_time, j.duration, j.num_gpus)


def plot_jct_cdf(report: QssfReport, path: str | Path, title: str = "") -> Path:
    """Write a PNG of each policy's JCT CDF (log-scale time axis); return its path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=120)
    for name, r in report.policies.items():
        xs = sorted(max(x, 1.0) for x in r.jct)
        n = len(xs)
        ys = [(i + 1) / n for i in range(n)]
        style = "--" if r.spec.backfill else "-"
        ax.step(xs, ys, style, where="post", label=f"{name} ({r.summary.avg_jct_s:,.0f} s)")
    ax.set_xscale("log")
    ax.set_xlabel("job completion time (s, log scale)")
    ax.set_ylabel("fraction of jobs")
    ax.set_ylim(0, 1.0)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(title="policy (average JCT)", fontsize=8)
    if title:
        ax.set_title(title, fontsize=9)
    fig.tight_layout()
    out = Path(path)
    fig.savefig(out)
    plt.close(fig)
    return out


@dataclass
class WaitingJob:
    """A job waiting in the simulated QSSF schedule at the snapshot time."""

    job_id: str
    num_gpus: int
    priority: float
    predicted_duration_s: float


@dataclass
class ScheduleSummary:
    """FIFO vs QSSF with gpuhint's hints (closed loop) vs the oracle, and a queue."""

    vc_sizes: dict[str, int]
    fifo_avg_jct_s: float
    qssf_avg_jct_s: float
    oracle_avg_jct_s: float
    hint_updates: int
    snapshot_at: float
    queues: dict[str, list[WaitingJob]]
    queue_times: dict[str, float]

    def as_dict(self) -> dict[str, Any]:
        return {
            "vc_sizes": dict(self.vc_sizes),
            "fifo_avg_jct_s": self.fifo_avg_jct_s,
            "qssf_avg_jct_s": self.qssf_avg_jct_s,
            "oracle_avg_jct_s": self.oracle_avg_jct_s,
            "jct_ratio_qssf_over_fifo": self.qssf_avg_jct_s / self.fifo_avg_jct_s,
            "jct_ratio_qssf_over_oracle": self.qssf_avg_jct_s / self.oracle_avg_jct_s,
            "hint_updates": self.hint_updates,
            "snapshot_at": self.snapshot_at,
            "queue_lengths": {vc: len(q) for vc, q in self.queues.items()},
            "queue_times": dict(self.queue_times),
        }


def schedule_summary(
    jobs: Sequence[TraceJob],
    model: str,
    *,
    snapshot_at: float,
    target_load: float = 0.9,
    vc_nodes: Mapping[str, int] | None = None,
) -> ScheduleSummary:
    """Schedule the GPU jobs under FIFO, the QSSF oracle and QSSF with closed-loop hints
    (VCs sized to ``target_load`` unless given); keep each VC's QSSF queue as it was at
    the last moment up to ``snapshot_at`` that had jobs waiting."""
    by_vc: dict[str, list[int]] = defaultdict(list)
    for k, j in enumerate(jobs):
        if j.num_gpus > 0:
            by_vc[j.vc].append(k)
    if not by_vc:
        raise InputError("trace", 0, "no job asks for a GPU: nothing to schedule")
    sizes = size_vcs(
        {
            vc: [(jobs[k].submit_time, jobs[k].duration, jobs[k].num_gpus) for k in ks]
            for vc, ks in by_vc.items()
        },
        target_load,
        GPUS_PER_NODE,
    )
    if vc_nodes:
        sizes.update({vc: n for vc, n in vc_nodes.items() if vc in sizes})
    tot = {"fifo": 0.0, "qssf": 0.0, "oracle": 0.0}
    n = 0
    updates = 0
    queues: dict[str, list[WaitingJob]] = {}
    queue_times: dict[str, float] = {}
    for vc, ks in sorted(by_vc.items()):
        sj = [_sim_job(jobs[k]) for k in ks]
        vc_jobs = [jobs[k] for k in ks]
        ranker = ClosedLoopRanker(vc_jobs, model, snapshot_at=snapshot_at)
        runs = {
            "fifo": simulate_vc(sj, sizes[vc], "fifo"),
            "oracle": simulate_vc(sj, sizes[vc], "qssf", priorities=[j.service for j in sj]),
            "qssf": simulate_vc(sj, sizes[vc], "qssf", ranker=ranker),
        }
        for name, out in runs.items():
            tot[name] += sum(o.end - j.submit for o, j in zip(out, sj, strict=True))
        n += len(sj)
        updates += ranker.hint_updates
        queues[vc] = [
            WaitingJob(vc_jobs[i].job_id, vc_jobs[i].num_gpus, p, ranker.predicted[i])
            for p, i in ranker.snapshot or []
        ]
        queue_times[vc] = ranker.snapshot_t
    return ScheduleSummary(
        vc_sizes=sizes,
        fifo_avg_jct_s=tot["fifo"] / n,
        qssf_avg_jct_s=tot["qssf"] / n,
        oracle_avg_jct_s=tot["oracle"] / n,
        hint_updates=updates,
        snapshot_at=snapshot_at,
        queues=queues,
        queue_times=queue_times,
    )
