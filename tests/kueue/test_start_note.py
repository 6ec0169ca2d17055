"""Expected starts into Workload annotations: the values, the plan, the applier (pure)."""

from __future__ import annotations

import calendar
import time
from datetime import datetime

import pytest

from gpuhint.kueue.applier import Applier, Cleared, clear_all
from gpuhint.kueue.hints import MemoryHints
from gpuhint.kueue.memory import InMemoryKueue
from gpuhint.kueue.objects import workload_ref
from gpuhint.kueue.policy import WorkloadView
from gpuhint.kueue.start_note import (
    ASOF_ANNOTATION,
    BAND_ANNOTATION,
    START_ANNOTATION,
    Start,
    notes_for,
    plan_notes,
)
from gpuhint.wire.contract import PriorityHint


def _t(text: str) -> float:
    return float(calendar.timegm(time.strptime(text, "%Y-%m-%dT%H:%M:%S")))


def _start(minute: int) -> Start:
    base = _t("2026-12-05T12:00:00")
    at = base + 60 * minute
    return Start(at + 20, at - 600, at + 1200, base)


def test_values_are_rfc3339_utc_to_the_minute_and_parse_back() -> None:
    n = notes_for(_start(5))
    assert n == {
        START_ANNOTATION: "2026-12-05T12:05:00Z",
        BAND_ANNOTATION: "2026-12-05T11:55:00Z/2026-12-05T12:25:00Z",
        ASOF_ANNOTATION: "2026-12-05T12:00:00Z",
    }
    low, high = n[BAND_ANNOTATION].split("/")
    assert datetime.fromisoformat(n[START_ANNOTATION]).timestamp() == _t("2026-12-05T12:05:00")
    assert datetime.fromisoformat(low) < datetime.fromisoformat(high)


def _view(
    name: str, job_id: str, *, pending: bool = True, start: Start | None = None
) -> WorkloadView:
    notes = (None, None, None) if start is None else tuple(notes_for(start).values())
    return WorkloadView("ns", name, name, job_id, "cq", None, 0, pending, notes=notes)


def test_plan_patches_changes_only_and_removes_what_no_forecast_names() -> None:
    views = [
        _view("new", "a"),
        _view("same", "b", start=_start(10)),
        _view("moved", "c", start=_start(10)),
        _view("gone", "d", start=_start(30)),  # no forecast names it now: removed
        _view("never", "e"),  # no forecast, no annotation: nothing
        _view("admitted", "f", pending=False, start=_start(1)),  # kept as it was
    ]
    starts = {"a": _start(5), "b": _start(10), "c": _start(20), "f": _start(2)}
    p = plan_notes(views, starts)
    assert [(a.workload, a.notes[START_ANNOTATION]) for a in p.patches] == [
        ("new", "2026-12-05T12:05:00Z"),
        ("moved", "2026-12-05T12:20:00Z"),
        ("gone", None),
    ]
    assert p.patches[-1].notes == dict.fromkeys(
        (START_ANNOTATION, BAND_ANNOTATION, ASOF_ANNOTATION)
    )
    assert (p.set, p.cleared, p.unchanged) == (2, 1, 1)
    # what this applier wrote counts while the cache lags behind
    lagging = plan_notes(views[:1], starts, {("ns", "new"): tuple(notes_for(_start(5)).values())})
    assert lagging.patches == [] and lagging.unchanged == 1


def test_a_workloads_annotations_are_read_from_the_api_object() -> None:
    obj = {
        "metadata": {"namespace": "ns", "name": "w", "uid": "u",
                     "annotations": {START_ANNOTATION: "2026-12-05T12:05:00Z", "x": "y"}},
        "spec": {"queueName": "lq"},
    }  # fmt: skip
    assert workload_ref(obj).notes == ("2026-12-05T12:05:00Z", None, None)
    assert workload_ref({"metadata": {"name": "w"}}).notes == (None, None, None)


def _hint(job_id: str) -> PriorityHint:
    return PriorityHint(job_id=job_id, cluster="c", num_gpus=1, submit_time=0,
                        predicted_duration_s=60, priority=60, model="m", model_version="1",
                        created_at=time.time())  # fmt: skip


def test_applier_annotates_once_dry_runs_and_leaves_them_when_redis_is_down() -> None:
    k = InMemoryKueue()
    for i in range(3):
        k.add_job("ns", f"j{i}", job_id=f"id{i}")
    hints = MemoryHints({f"id{i}": _hint(f"id{i}") for i in range(3)})
    hints.starts = {f"id{i}": tuple(_start(5 * i)) for i in range(2)}  # type: ignore[misc]
    off = Applier(k, hints, "c", rate=0).run_pass()
    assert not off.expected_start and k.annotations == 0
    dry = Applier(k, hints, "c", rate=0, dry_run=True, start_note=True).run_pass()
    assert [p["workload"] for p in dry.planned_starts] == ["job-j0", "job-j1"]
    assert dry.starts_annotated == 2 and k.annotations == 0
    a = Applier(k, hints, "c", rate=0, start_note=True, hint_errors=(ConnectionError,))
    r = a.run_pass()
    assert (r.starts_annotated, r.starts_cleared, r.expected_start) == (2, 0, True)
    assert k.jobs["ns/j1"].view.notes[0] == "2026-12-05T12:05:00Z"
    assert a.run_pass().starts_annotated == 0 and k.annotations == 2  # only changes
    del hints.starts["id1"]  # j1 dropped out of the forecast
    r = a.run_pass()
    assert r.starts_cleared == 1 and k.jobs["ns/j1"].view.notes == (None, None, None)
    hints.down = True
    hints.starts["id0"] = tuple(_start(50))  # type: ignore[assignment]
    cached = a.run_pass()
    assert cached.hints_from == "cache" and not cached.expected_start and k.annotations == 3


def test_no_rbac_to_patch_workloads_turns_the_annotations_off_once() -> None:
    class Forbidden(InMemoryKueue):
        def annotate(self, namespace: str, workload: str, notes: dict[str, str | None]) -> bool:
            self.annotations += 1
            err = RuntimeError("HTTP 403: forbidden")
            err.status = 403  # type: ignore[attr-defined]
            raise err

    k = Forbidden()
    for i in range(3):
        k.add_job("ns", f"j{i}", job_id=f"id{i}")
    hints = MemoryHints({f"id{i}": _hint(f"id{i}") for i in range(3)})
    hints.starts = {f"id{i}": tuple(_start(5 * i)) for i in range(3)}  # type: ignore[misc]
    a = Applier(k, hints, "c", rate=0, start_note=True)
    r = a.run_pass()
    assert (r.errors, k.annotations, a.start_note) == (1, 1, False)
    assert a.run_pass().errors == 0 and k.annotations == 1  # relabels go on, no more tries


def test_clear_removes_classes_and_annotations_of_waiting_workloads_only() -> None:
    """Turning gpuhint off (``apply-priorities --clear``) leaves no class and no
    expected-start note on a waiting Workload; admitted ones are not touched."""
    k = InMemoryKueue()
    for i in range(3):
        k.add_job("ns", f"j{i}", job_id=f"id{i}")
    hints = MemoryHints({f"id{i}": _hint(f"id{i}") for i in range(3)})
    hints.starts = {f"id{i}": tuple(_start(5 * i)) for i in range(3)}  # type: ignore[misc]
    a = Applier(k, hints, "c", rate=0, start_note=True)
    a.run_pass()
    k.admit("ns", "j2")
    ladder = a.ladder
    assert all(ladder.owns(j.view.job_class) for j in k.jobs.values())
    dry = clear_all(k, ladder, dry_run=True)
    assert dry == Cleared(classes=2, notes=2) and k.jobs["ns/j0"].view.notes[0] is not None
    assert clear_all(k, ladder) == Cleared(classes=2, notes=2)
    for name in ("j0", "j1"):
        view = k.jobs[f"ns/{name}"].view
        assert view.job_class is None and view.notes == (None, None, None)
    j2 = k.jobs["ns/j2"].view  # admitted: left as it is
    assert ladder.owns(j2.job_class) and j2.notes[0] is not None
    assert clear_all(k, ladder) == Cleared(classes=0, notes=0)


def test_the_api_server_gone_while_annotating_fails_the_pass_after_one_try() -> None:
    """No answer to an annotation patch: the API server is down; the pass fails as an
    outage (logged once by the daemon) rather than one warning per Workload per pass."""
    from gpuhint.kueue.errors import KubeError

    class Gone(InMemoryKueue):
        def annotate(self, namespace: str, workload: str, notes: dict[str, str | None]) -> bool:
            self.annotations += 1
            raise KubeError(0, f"PATCH workloads/{workload}: Connection refused")

    k = Gone()
    for i in range(3):
        k.add_job("ns", f"j{i}", job_id=f"id{i}", job_class="gpuhint-09")
    hints = MemoryHints({f"id{i}": _hint(f"id{i}") for i in range(3)})
    hints.starts = {f"id{i}": tuple(_start(5 * i)) for i in range(3)}  # type: ignore[misc]
    with pytest.raises(KubeError):
        Applier(k, hints, "c", rate=0, start_note=True).run_pass()
    assert k.annotations == 1
