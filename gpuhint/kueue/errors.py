"""The Kubernetes API's failures, as the applier's code sees them."""

from __future__ import annotations


class KubeError(RuntimeError):
    """An API request failed: ``status`` is the HTTP code (0: no answer)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"HTTP {status}: {message}" if status else message)
        self.status = status


class Gone(Exception):
    """A watch's resourceVersion is too old (HTTP 410 in the stream): list again."""
