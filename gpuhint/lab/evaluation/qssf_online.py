"""The QSSF hints inside an evaluation: open loop over the trace's own timeline
(:func:`predict_online`) or closed loop inside the simulated schedule
(:class:`ClosedLoopRanker`), both through :class:`gpuhint.cores.qssf.HintEngine`."""

from __future__ import annotations

import math
import time
from collections import defaultdict, deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from gpuhint.cores.sink import BufferedStore, Op, PutStarts
from gpuhint.lab.evaluation.qssf_inputs import InputError
from gpuhint.lab.evaluation.starts import StartRecorder
from gpuhint.lab.traces.readers import TraceJob
from gpuhint.wire.contract import ClusterLoad, PowerAdvisory, PriorityHint, StartForecasts


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
    # the expected duration the hint ranked by at submit (``expected_duration_s``; a
    # hint without it: priority / GPUs), which stays right when the priority is an
    # override (the FIFO guard's fallback publishes the submit time)
    submit_expected: list[float] = field(default_factory=list)
    # the scored jobs' |predicted - true| / true (``median_abs_pct_error``'s sample), so
    # that VCs merge into the median over all their jobs
    abs_pct_errors: list[float] = field(default_factory=list)


def expected_at_submit(hint: PriorityHint) -> float:
    """The expected duration a hint ranks by (``expected_duration_s``, else priority /
    GPUs, the hints of before that field)."""
    if hint.expected_duration_s is not None:
        return hint.expected_duration_s
    return hint.priority / max(hint.num_gpus, 1)


def check_unique_ids(jobs: Sequence[TraceJob]) -> None:
    """Refuse a repeated job id: the hint core takes a second submit of an id for a
    producer's resend and gives it no new hint (:class:`InputError`, ``trace: ...``)."""
    seen: set[str] = set()
    for j in jobs:
        if j.job_id in seen:
            raise InputError(
                "trace", 0, f"job id {j.job_id!r} appears twice: give each job its own id"
            )
        seen.add(j.job_id)


def predict_online(
    jobs: Sequence[TraceJob], model_name: str, cluster: str = "eval"
) -> OnlinePredictions:
    """Replay ``jobs`` through the hint core as the worker would; keep each job's hint."""
    from functools import partial

    from gpuhint.cores.qssf import HintEngine
    from gpuhint.cores.sink import InMemoryStore
    from gpuhint.lab.traces.readers import job_events
    from models.registry import make_model

    check_unique_ids(jobs)
    model = make_model(model_name)  # for its name and version; each VC gets its own
    engine = HintEngine(partial(make_model, model_name), InMemoryStore(), clock=lambda: 0.0)
    pending: dict[str, deque[int]] = defaultdict(deque)
    for k, j in enumerate(jobs):
        pending[j.job_id].append(k)
    priority = [math.nan] * len(jobs)
    predicted = [math.nan] * len(jobs)
    p10 = [math.nan] * len(jobs)
    p90 = [math.nan] * len(jobs)
    expected = [math.nan] * len(jobs)
    events = job_events(jobs, cluster=cluster)
    t0 = time.perf_counter()
    for ev in events:
        hint = engine.on_job_event(ev)
        if hint is not None:
            k = pending[ev.job_id].popleft()
            priority[k] = hint.priority
            predicted[k] = hint.predicted_duration_s
            p10[k], p90[k] = _band(hint)
            expected[k] = expected_at_submit(hint)
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
        submit_expected=expected,
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
        check_unique_ids(jobs)
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
            [j.duration for j in jobs],
        )
        self.snapshot_at = snapshot_at
        self.snapshot: list[tuple[float, int]] | None = None  # (priority, job) waiting then
        self.snapshot_t = math.nan
        self.snapshot_hints: dict[int, PriorityHint] = {}
        """Each job waiting at the snapshot -> its hint as published then."""
        self._since_snapshot = 0
        self.cluster = cluster
        self.model_name = model_name
        self.index_of = {j.job_id: k for k, j in enumerate(jobs)}
        self.priority: list[float] = [math.nan] * len(jobs)
        self.predicted: list[float] = [math.nan] * len(jobs)  # at submit
        self.p10: list[float] = [math.nan] * len(jobs)  # the band at submit
        self.p90: list[float] = [math.nan] * len(jobs)
        self.submit_priority: list[float] = [math.nan] * len(jobs)
        self.submit_expected: list[float] = [math.nan] * len(jobs)
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
        self.snapshot_hints = {self.index_of[jid]: p.hint for jid, p in waiting.items()}

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
        if hint is None:  # a submit the core took for a resend (a job submitted again)
            raise InputError(
                "trace", 0, f"job {self.jobs[i].job_id!r} submitted again: the core gave no hint"
            )
        self._hold()
        self.priority[i] = hint.priority
        self.predicted[i] = hint.predicted_duration_s
        self.p10[i], self.p90[i] = _band(hint)
        self.submit_priority[i] = hint.priority
        self.submit_expected[i] = expected_at_submit(hint)
        self.model_version = hint.model_version
        return hint.priority

    def run_time(self, i: int) -> float | None:
        """The run time a backfilling scheduler should assume for job ``i`` (asked after
        its submit): its hint's p90, else its expected duration; ``None`` if neither."""
        for x in (self.p90[i], self.predicted[i]):
            if math.isfinite(x):
                return x
        return None

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
            submit_expected=self.submit_expected,
            abs_pct_errors=list(s.abs_pct_errors),
        )


def merge_predictions(
    n: int, per_vc: list[tuple[list[int], OnlinePredictions]], model: str
) -> OnlinePredictions:
    """One summary of the closed-loop predictors of every VC (errors weighted by jobs;
    priorities and predictions back in trace order, NaN for jobs not scheduled)."""
    priority = [math.nan] * n
    predicted = [math.nan] * n
    p10 = [math.nan] * n
    p90 = [math.nan] * n
    submit_priority = [math.nan] * n
    submit_expected = [math.nan] * n
    for ks, p in per_vc:
        for pos, k in enumerate(ks):
            priority[k] = p.priority[pos]
            predicted[k] = p.predicted_duration[pos]
            if p.p10:
                p10[k], p90[k] = p.p10[pos], p.p90[pos]
                submit_priority[k] = p.submit_priority[pos]
            if p.submit_expected:
                submit_expected[k] = p.submit_expected[pos]
    parts = [p for _, p in per_vc]
    scored = sum(p.scored for p in parts)
    mae = sum((p.mae_log or 0.0) * p.scored for p in parts) / scored if scored else None
    errors = [e for p in parts for e in p.abs_pct_errors]
    return OnlinePredictions(
        priority=priority,
        predicted_duration=predicted,
        model=parts[0].model if parts else model,
        model_version=parts[0].model_version if parts else "",
        events=sum(p.events for p in parts),
        seconds=sum(p.seconds for p in parts),
        mae_log=mae,
        median_abs_pct_error=_median(errors),
        scored=scored,
        hint_updates=sum(p.hint_updates for p in parts),
        p10=p10,
        p90=p90,
        submit_priority=submit_priority,
        submit_expected=submit_expected,
        abs_pct_errors=errors,
    )


def _median(xs: list[float]) -> float | None:
    """The median as :attr:`gpuhint.cores.qssf_state.EngineStats.median_abs_pct_error`."""
    if not xs:
        return None
    ys = sorted(xs)
    mid = len(ys) // 2
    return ys[mid] if len(ys) % 2 else (ys[mid - 1] + ys[mid]) / 2
