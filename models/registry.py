"""Named duration models, for the CLI, the worker and the contract test suite."""

from __future__ import annotations

from collections.abc import Callable

from models.base import DurationModel
from models.duration_river import (
    ForestDurationModel,
    KeyedDurationModel,
    LinearDurationModel,
    TreeDurationModel,
)
from models.history import HistoryEstimator

DURATION_MODELS: dict[str, Callable[[], DurationModel]] = {
    "history": HistoryEstimator,
    "history_mix": KeyedDurationModel,
    "river_linear": LinearDurationModel,
    "river_tree": TreeDurationModel,
    "river_arf": ForestDurationModel,
}

DEFAULT_MODEL = "history_mix"
"""Chosen by measurement (docs/models.md): the most accurate online on every trace we
have, on average, and the fastest of the learned models. ``river_linear`` is within 1%
and explains itself by feature contributions; ``history`` is the paper's baseline."""


def make_model(name: str) -> DurationModel:
    try:
        factory = DURATION_MODELS[name]
    except KeyError:
        raise ValueError(
            f"unknown model {name!r}; choose one of {', '.join(sorted(DURATION_MODELS))}"
        ) from None
    return factory()
