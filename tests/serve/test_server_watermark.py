"""``gpuhint serve``'s feed watermark names its feed: a Kueue feed refuses a Slurm one
(pure: a fake log and snapshot, no API server)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gpuhint.cores.job_tracker import JobTracker
from gpuhint.cores.job_watermark import tracker_doc
from gpuhint.kueue.pods import KueueFeed, KueueSnapshot
from gpuhint.serve.server import WATERMARK_META, restore_feed
from gpuhint.wire.contract import JobState


class _Snapshot(KueueSnapshot):
    def __init__(self) -> None:
        pass

    def read(self) -> dict[str, Any]:
        return {"jobs": [], "workloads": [], "localqueues": []}


class _Log:
    path = "serve-k8s.sqlite"

    def __init__(self, doc: dict[str, Any]) -> None:
        self.doc = doc

    def meta(self, key: str) -> str | None:
        return json.dumps(self.doc) if key == WATERMARK_META else None

    def committed(self) -> int:
        return 0


class _One:
    def __init__(self, doc: dict[str, Any]) -> None:
        self.log = _Log(doc)


def _kueue_feed() -> KueueFeed:
    return KueueFeed(JobTracker(cluster="k8s", vanished_state=JobState.CANCELLED), _Snapshot())


def test_a_kueue_serve_refuses_a_slurm_watermark_and_takes_an_old_untagged_one() -> None:
    slurm = tracker_doc(JobTracker(cluster="k8s"), 5.0, "slurm")
    with pytest.raises(ValueError, match="watermark of the slurm feed, not of the kueue feed"):
        restore_feed(_kueue_feed(), _One(slurm))  # type: ignore[arg-type]
    feed = _kueue_feed()
    restore_feed(feed, _One(tracker_doc(JobTracker(cluster="k8s"), 5.0)))  # type: ignore[arg-type]
    assert feed.last_poll == 5.0
    assert tracker_doc(feed.tracker, 6.0, feed.kind)["kind"] == "kueue"
