"""Versioned checkpoints of a duration model: a JSON header line, then a pickle.

Layout: ``GPUHINT-MODEL-CHECKPOINT\\n`` + one line of JSON (``format``, ``model``,
``model_version``, ``gpuhint_version``, ``created_at``) + the pickled model. A reader
refuses a file that is not a checkpoint, a format it does not know, or (when asked for
one) a different model or model version, with a one-line :class:`CheckpointError`.
Only load checkpoints you wrote: unpickling runs code from the file.

>>> from models.history import HistoryEstimator
>>> blob = dumps(HistoryEstimator())
>>> read_header(blob)["model"]
'history'
>>> loads(blob, expect_model="history").name
'history'
"""

from __future__ import annotations

import json
import os
import pickle
import tempfile
import time
from pathlib import Path
from typing import Any

from gpuhint.wire.version import VERSION
from models.base import DurationModel

MAGIC = b"GPUHINT-MODEL-CHECKPOINT\n"
FORMAT_VERSION = 1
"""Bump when the layout changes; readers refuse formats they do not know."""


class CheckpointError(ValueError):
    """A checkpoint that cannot be used; the message says why in one line."""


def dumps(model: DurationModel) -> bytes:
    """Serialize a model with its header."""
    header = {
        "format": FORMAT_VERSION,
        "model": model.name,
        "model_version": model.version,
        "gpuhint_version": VERSION,
        "created_at": time.time(),
    }
    head = json.dumps(header, sort_keys=True).encode() + b"\n"
    return MAGIC + head + pickle.dumps(model, protocol=pickle.HIGHEST_PROTOCOL)


def _split(blob: bytes) -> tuple[dict[str, Any], bytes]:
    if not blob.startswith(MAGIC):
        raise CheckpointError("not a gpuhint model checkpoint (bad magic)")
    end = blob.find(b"\n", len(MAGIC))
    if end < 0:
        raise CheckpointError("truncated checkpoint: no header line")
    try:
        header = json.loads(blob[len(MAGIC) : end])
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"unreadable checkpoint header: {exc}") from None
    if not isinstance(header, dict):
        raise CheckpointError("unreadable checkpoint header: not a JSON object")
    fmt = header.get("format")
    if fmt != FORMAT_VERSION:
        raise CheckpointError(
            f"unsupported checkpoint format {fmt!r} (this build reads {FORMAT_VERSION})"
        )
    return header, blob[end + 1 :]


def read_header(blob: bytes) -> dict[str, Any]:
    """The header of a checkpoint, without unpickling the model."""
    return _split(blob)[0]


def loads(
    blob: bytes, expect_model: str | None = None, expect_version: str | None = None
) -> DurationModel:
    """Restore a model; refuse another model name or version when one is expected."""
    header, payload = _split(blob)
    if expect_model is not None and header.get("model") != expect_model:
        raise CheckpointError(
            f"checkpoint holds model {header.get('model')!r}, expected {expect_model!r}"
        )
    if expect_version is not None and header.get("model_version") != expect_version:
        raise CheckpointError(
            f"checkpoint holds {header.get('model')!r} version "
            f"{header.get('model_version')!r}, expected version {expect_version!r}"
        )
    try:
        model = pickle.loads(payload)
    except Exception as exc:  # a corrupt or foreign pickle can raise nearly anything
        raise CheckpointError(f"corrupt checkpoint payload: {type(exc).__name__}: {exc}") from None
    name, version = getattr(model, "name", None), getattr(model, "version", None)
    if (name, version) != (header.get("model"), header.get("model_version")):
        raise CheckpointError(
            f"checkpoint header says {header.get('model')!r} v{header.get('model_version')} "
            f"but the payload is {name!r} v{version}"
        )
    if not isinstance(model, DurationModel):
        raise CheckpointError(f"checkpoint payload is not a duration model: {type(model)!r}")
    return model


def save(model: DurationModel, path: str | Path) -> None:
    """Write a checkpoint atomically (a crash leaves the previous file intact)."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", dir=p.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(dumps(model))
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, p)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def load(
    path: str | Path, expect_model: str | None = None, expect_version: str | None = None
) -> DurationModel:
    """Read a checkpoint written by :func:`save` (see :func:`loads`)."""
    p = Path(path)
    try:
        blob = p.read_bytes()
    except OSError as exc:
        raise CheckpointError(f"{p}: cannot read checkpoint: {exc.strerror}") from None
    try:
        return loads(blob, expect_model, expect_version)
    except CheckpointError as exc:
        raise CheckpointError(f"{p}: {exc}") from None
