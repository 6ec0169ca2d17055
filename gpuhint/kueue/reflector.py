"""A cache of one Kubernetes kind kept current by list + watch, in a thread.

A paged list, then a watch from its resourceVersion, re-listing when the server says the
version is gone (410) or the connection broke. The thread never ends before ``stop``:
an unexpected failure (a bug, an object the transform cannot read) is logged with its
traceback and the kind re-listed after a back-off, so a cache is never frozen silently;
an object the transform cannot read is left out of the cache with a warning, the rest
of the kind is kept.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any, Generic, Protocol, TypeVar

from gpuhint.kueue.errors import Gone, KubeError
from gpuhint.kueue.objects import key

log = logging.getLogger("gpuhint.kueue")
T = TypeVar("T")


class ListWatch(Protocol):
    """What a reflector needs of the API (:class:`gpuhint.kueue.kube.KubeApi`)."""

    def list_all(
        self, path: str, label_selector: str | None = None, page: int = 500
    ) -> tuple[list[dict[str, Any]], str]: ...

    def watch(
        self, path: str, resource_version: str, label_selector: str | None, timeout_s: int
    ) -> Iterator[dict[str, Any]]: ...


class Reflector(Generic[T]):
    """A cache of one kind: ``items`` maps ``namespace/name`` to ``transform(object)``."""

    def __init__(
        self,
        api: ListWatch,
        path: str,
        transform: Callable[[dict[str, Any]], T],
        label_selector: str | None = None,
        watch_timeout_s: int = 300,
    ) -> None:
        self.api = api
        self.path = path
        self.transform = transform
        self.label_selector = label_selector
        self.watch_timeout_s = watch_timeout_s
        self.items: dict[str, T] = {}
        self.resource_version = ""
        self.events = 0
        self.changed = threading.Event()  # set on every change; the applier waits on it
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def relist(self) -> None:
        objs, rv = self.api.list_all(self.path, self.label_selector)
        fresh = {}
        for o in objs:
            item = self._read(o)
            if item is not None:
                fresh[key(o)] = item
        with self._lock:
            self.items = fresh
            self.resource_version = rv
        self.changed.set()

    def snapshot(self) -> list[T]:
        with self._lock:
            return list(self.items.values())

    def get(self, k: str) -> T | None:
        with self._lock:
            return self.items.get(k)

    def start(self, stop: threading.Event) -> None:
        """List, then watch in a thread; a reflector already watching is left as it is
        (a start that failed on another kind is tried again)."""
        if self._thread is not None:
            return
        self.relist()
        self._thread = threading.Thread(
            target=self._run, args=(stop,), name=f"watch {self.path}", daemon=True
        )
        self._thread.start()

    def _run(self, stop: threading.Event) -> None:
        backoff = 1.0
        while not stop.is_set():
            try:
                for ev in self.api.watch(
                    self.path, self.resource_version, self.label_selector, self.watch_timeout_s
                ):
                    if stop.is_set():
                        return
                    self._apply(ev)
                backoff = 1.0
            except Gone:
                log.info("%s: resourceVersion too old, re-listing", self.path)
                self._relist_quietly(stop)
            except KubeError as exc:
                if stop.is_set():
                    return
                log.warning("%s: watch failed (%s); retrying in %.0f s", self.path, exc, backoff)
                stop.wait(backoff)
                backoff = min(backoff * 2, 30.0)
                if exc.status in (0, 410):
                    self._relist_quietly(stop)
            except Exception:  # a bug must not freeze the cache silently
                if stop.is_set():
                    return
                log.exception("%s: watch thread error; re-listing in %.0f s", self.path, backoff)
                stop.wait(backoff)
                backoff = min(backoff * 2, 30.0)
                self._relist_quietly(stop)

    def _relist_quietly(self, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                self.relist()
                return
            except KubeError as exc:
                log.warning("%s: list failed (%s); retrying", self.path, exc)
                stop.wait(5.0)
            except Exception:
                log.exception("%s: list failed; retrying", self.path)
                stop.wait(5.0)

    def _read(self, obj: dict[str, Any]) -> T | None:
        """``transform(obj)``, or None (logged) for an object it cannot read."""
        try:
            return self.transform(obj)
        except Exception as exc:
            log.warning("%s: left out %s, unreadable: %r", self.path, key(obj), exc)
            return None

    def _apply(self, ev: dict[str, Any]) -> None:
        kind, obj = ev.get("type"), ev.get("object") or {}
        if kind == "ERROR":
            if obj.get("code") == 410:
                raise Gone()
            raise KubeError(int(obj.get("code") or 0), str(obj.get("message")))
        rv = (obj.get("metadata") or {}).get("resourceVersion")
        with self._lock:
            if kind in ("ADDED", "MODIFIED"):
                item = self._read(obj)
                if item is None:
                    self.items.pop(key(obj), None)
                else:
                    self.items[key(obj)] = item
            elif kind == "DELETED":
                self.items.pop(key(obj), None)
            if rv:
                self.resource_version = str(rv)
        if kind != "BOOKMARK":
            self.events += 1
            self.changed.set()


class _Gone(Exception):
    pass
