"""JSON for the ``--json`` outputs and report files: JSON has no NaN or infinities.

>>> finite({"a": float("nan"), "b": (1.0, float("inf"))})
{'a': None, 'b': [1.0, None]}
"""

from __future__ import annotations

import math
from typing import Any


def finite(obj: Any) -> Any:
    """NaN and infinities as None, recursively (tuples become lists, as in JSON)."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: finite(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [finite(v) for v in obj]
    return obj
