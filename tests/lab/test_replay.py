from __future__ import annotations

from gpuhint.lab.replay import paced, replay
from gpuhint.wire.contract import JobEvent, decode_job_event


def evs(times: list[float]) -> list[JobEvent]:
    return [
        JobEvent(phase="submitted", job_id=str(i), vc="v", time=t, submit_time=t)
        for i, t in enumerate(times)
    ]


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0
        self.slept: list[float] = []

    def sleep(self, s: float) -> None:
        self.slept.append(s)
        self.now += s

    def __call__(self) -> float:
        return self.now


def test_paced_runs_trace_time_speed_times_faster() -> None:
    clock = FakeClock()
    out = list(paced(evs([0, 60, 60, 180]), speed=60, sleep=clock.sleep, clock=clock))
    assert len(out) == 4
    assert clock.slept == [1.0, 2.0]  # 60 s and 120 s of trace time at 60x
    assert clock.now == 103.0


def test_max_speed_never_sleeps() -> None:
    clock = FakeClock()
    assert len(list(paced(evs([0, 1e6]), speed=None, sleep=clock.sleep, clock=clock))) == 2
    assert clock.slept == []


def test_replay_keys_by_cluster_and_vc() -> None:
    sent: list[tuple[str, bytes, bytes]] = []
    n = replay(evs([0, 1]), "topic", lambda t, k, v: sent.append((t, k, v)))
    assert n == 2
    assert [k for _, k, _ in sent] == [b"default/v", b"default/v"]
    assert decode_job_event(sent[1][2]).job_id == "1"
