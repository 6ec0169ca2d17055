"""The metric names docs/metrics.md documents (tests check every served one is listed)."""

from __future__ import annotations

import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[3] / "docs" / "metrics.md"
_ROW = re.compile(r"^\| `([A-Za-z_:][A-Za-z0-9_:]*)` \|", flags=re.MULTILINE)
_SUFFIXES = ("_total", "_count", "_sum", "_bucket", "_created")


def documented_metrics(doc: Path = DOC) -> set[str]:
    """Names in the first column of the tables of docs/metrics.md."""
    return set(_ROW.findall(doc.read_text()))


def undocumented(sample_names: set[str], doc: Path = DOC) -> set[str]:
    """Sample names (``gpuhint_*``, ``DCGM_*``) whose metric is not in the docs."""
    known = documented_metrics(doc)
    missing = set()
    for name in sample_names:
        if not name.startswith(("gpuhint_", "DCGM_")):
            continue
        base = name
        for suffix in _SUFFIXES:
            if name.endswith(suffix) and name not in known:
                base = name[: -len(suffix)]
                break
        if name not in known and base not in known and base + "_total" not in known:
            missing.add(name)
    return missing
