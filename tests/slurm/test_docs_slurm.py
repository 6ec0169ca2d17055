"""docs/slurm.md says what the code does: the SiteFactor table of the map's defaults."""

from __future__ import annotations

from pathlib import Path

from gpuhint.slurm.priority import FactorMap

DOC = Path(__file__).resolve().parents[2] / "docs" / "slurm.md"


def test_the_factor_table_is_the_default_map() -> None:
    rows = [ln for ln in DOC.read_text().splitlines() if ln.startswith("| SiteFactor ")]
    assert len(rows) == 1
    shown = [int(c.strip()) for c in rows[0].strip("|").split("|")[1:]]
    p = [0, 60, 3600, 8 * 3600, 86400, 64 * 30 * 86400]  # the header's columns
    assert shown == [FactorMap().factor(x) for x in p]
