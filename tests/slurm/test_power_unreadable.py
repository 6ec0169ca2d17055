"""apply-power when the cluster's advisory cannot be read (a newer worker's schema
during an upgrade, or junk): the pass goes on as without advice, it does not crash."""

from __future__ import annotations

from collections.abc import Sequence

from gpuhint.redis.client import UnreadableValue
from gpuhint.slurm.power import Node, PowerApplier
from gpuhint.wire.contract import PowerAdvisory


class _Slurm:
    def __init__(self, nodes: list[Node]) -> None:
        self._nodes = nodes
        self.applied: list[str] = []

    def nodes(self) -> list[Node]:
        return self._nodes

    def apply(self, lines: Sequence[str]) -> list[str]:
        self.applied.extend(lines)
        return []


class _BadAdvice:
    def cluster_advice(self, cluster: str) -> PowerAdvisory | None:
        raise UnreadableValue(f"gpuhint:advice:{cluster}", "schema_version 9 is not readable")


def test_unreadable_advice_is_no_advice() -> None:
    slurm = _Slurm([Node("n1", "allocated"), Node("n2", "idle~"), Node("n3", "idle~")])
    applier = PowerApplier(slurm, _BadAdvice(), "c", min_idle=1, min_on=1)
    result = applier.run_pass(1000.0)  # raised UnreadableValue before the fix
    assert result.advice_age_s is None and result.powered_up == ["n2"]
    assert slurm.applied == ["update nodename=n2 state=power_up"]  # the buffer rule alone
    assert result.powered_down == []
