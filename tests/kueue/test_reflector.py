"""The list + watch cache (gpuhint/kueue/reflector.py) against a scripted API: an object
the transform cannot read, or an unexpected failure, must not freeze the cache."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

from gpuhint.kueue.reflector import Reflector


def _obj(name: str, value: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "resourceVersion": "1"}, "value": value}


def _int_value(o: dict[str, Any]) -> int:
    return int(o["value"])  # "bad" cannot be read


class ScriptedApi:
    """``list_all`` answers ``lists`` in turn (the last one again); each ``watch`` call
    runs the next script: a list of events, or an exception to raise."""

    def __init__(self, lists: list[list[dict[str, Any]]], watches: list[Any]) -> None:
        self.lists, self.watches, self.listed = lists, watches, 0
        self.done = threading.Event()

    def list_all(
        self, path: str, label_selector: str | None = None, page: int = 500
    ) -> tuple[list[dict[str, Any]], str]:
        self.listed += 1
        return (self.lists.pop(0) if len(self.lists) > 1 else self.lists[0]), str(self.listed)

    def watch(
        self, path: str, rv: str, sel: str | None, timeout_s: int
    ) -> Iterator[dict[str, Any]]:
        if not self.watches:
            self.done.set()
            threading.Event().wait(0.05)
            return
        step = self.watches.pop(0)
        if isinstance(step, BaseException):
            raise step
        yield from step


def _run(api: ScriptedApi) -> Reflector[int]:
    r: Reflector[int] = Reflector(api, "/x", _int_value)  # type: ignore[arg-type]
    stop = threading.Event()
    r.start(stop)
    assert api.done.wait(10.0), "the watch thread ended before its script did"
    stop.set()
    return r


def test_an_unreadable_object_is_left_out_and_the_rest_of_the_kind_kept() -> None:
    api = ScriptedApi([[_obj("a", 1), _obj("b", "bad"), _obj("c", 3)]], [])
    r = _run(api)
    assert r.items == {"a": 1, "c": 3}


def test_an_unexpected_failure_of_the_watch_relists_and_keeps_watching() -> None:
    later = [{"type": "ADDED", "object": _obj("d", 4)}]
    api = ScriptedApi([[_obj("a", 1)], [_obj("a", 1), _obj("b", 2)]], [RuntimeError("bug"), later])
    r = _run(api)
    assert api.listed == 2  # the start, then after the failure
    assert r.items == {"a": 1, "b": 2, "d": 4}


def test_an_unreadable_watch_event_drops_the_object_not_the_thread() -> None:
    events = [
        {"type": "ADDED", "object": _obj("a", 5)},
        {"type": "MODIFIED", "object": _obj("a", "bad")},
        {"type": "ADDED", "object": _obj("e", 6)},
    ]
    api = ScriptedApi([[_obj("a", 1)]], [events])
    r = _run(api)
    assert r.items == {"e": 6}


def test_a_second_start_after_another_kind_failed_to_list_starts_no_second_watch() -> None:
    """The daemon retries a failed start (the API server down at boot) for every kind:
    a kind already watching is neither listed nor watched twice."""
    api = ScriptedApi([[_obj("a", 1)]], [])
    r: Reflector[int] = Reflector(api, "/x", _int_value)
    stop = threading.Event()
    try:
        r.start(stop)
        first = r._thread
        r.start(stop)
        assert r._thread is first and api.listed == 1
    finally:
        stop.set()
