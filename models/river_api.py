"""River's estimator interface on the duration models: a featurizer and a regressor.

:func:`featurize` turns a submitted :class:`JobEvent` into a flat dict at submit (what a
River pipeline passes around); :class:`RiverRegressor` wraps any
:class:`models.base.DurationModel` as a ``river.base.Regressor`` whose ``predict_one``
is pure and whose ``learn_one(x, y)`` learns the job's duration ``y``. So River's own
tools run on gpuhint's models, e.g. ``river.evaluate.progressive_val_score`` with
delayed labels (a job's duration is known ``duration`` seconds after its submit):

>>> import datetime as dt
>>> from river import evaluate, metrics
>>> from gpuhint.wire.contract import JobEvent
>>> from models.registry import make_model
>>> jobs = [JobEvent(phase="submitted", job_id=str(i), user="u", num_gpus=1,
...                  time=60.0 * i, submit_time=60.0 * i) for i in range(40)]
>>> stream = [(featurize(j), 600.0) for j in jobs]
>>> metric = evaluate.progressive_val_score(
...     stream, RiverRegressor(make_model("history_mix")), metrics.MAE(),
...     moment="submit_time", delay=lambda x, y: dt.timedelta(seconds=y))
>>> metric.get() < 3000.0
True
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Hashable
from typing import Any

from river import base

from gpuhint.wire.contract import JobEvent, JobPhase
from models.base import DurationModel

_FIELDS = (
    "job_id",
    "cluster",
    "vc",
    "user",
    "name",
    "num_gpus",
    "num_cpus",
    "num_nodes",
    "time_limit_s",
    "partition",
)


def featurize(job: JobEvent) -> dict[str, Any]:
    """The job as River sees it at submit: its fields, ``submit_time`` as a datetime
    (River's ``moment``), and ``submit_s`` in seconds."""
    x: dict[str, Any] = {f: getattr(job, f) for f in _FIELDS}
    x["submit_s"] = job.submit_time
    x["submit_time"] = dt.datetime.fromtimestamp(job.submit_time, tz=dt.UTC)
    return x


def job_of(x: dict[Hashable, Any]) -> JobEvent:
    """The submitted :class:`JobEvent` back from :func:`featurize`'s dict."""
    t = float(x["submit_s"])
    fields: dict[str, Any] = {f: x[f] for f in _FIELDS if x.get(f) is not None}
    fields.update(phase=JobPhase.SUBMITTED, time=t, submit_time=t)
    return JobEvent.model_validate(fields)


class RiverRegressor(base.Regressor):
    """A duration model as a River regressor: ``predict_one(x)`` is the point forecast
    in seconds from what the model knows now (pure), ``learn_one(x, y)`` learns
    duration ``y``."""

    def __init__(self, model: DurationModel) -> None:
        self.model = model

    def predict_one(self, x: dict[Hashable, Any]) -> float:
        return float(self.model.predict_one(job_of(x)).duration_s)

    def learn_one(self, x: dict[Hashable, Any], y: float) -> None:
        self.model.learn_one(job_of(x), float(y))
