"""Kafka helpers of benchmarks and tests, on the real broker; the local broker's
group formation setting."""

from __future__ import annotations

from pathlib import Path

from gpuhint.lab.local.kafka_tools import broker_config
from gpuhint.lab.local.services import LocalKafka


def test_broker_config_reads_a_setting_from_the_broker(kafka_bootstrap: str) -> None:
    value = broker_config(kafka_bootstrap, "group.initial.rebalance.delay.ms")
    assert value is not None and int(value) >= 0
    assert broker_config(kafka_bootstrap, "log.dirs") not in (None, "")


def test_broker_config_of_an_unknown_name_is_none(kafka_bootstrap: str) -> None:
    assert broker_config(kafka_bootstrap, "no.such.setting") is None


def test_local_broker_forms_groups_at_once_unless_asked_to_wait(tmp_path: Path) -> None:
    def line(kafka: LocalKafka) -> list[str]:
        props = kafka._properties().read_text().splitlines()
        return [p for p in props if p.startswith("group.initial.rebalance.delay.ms=")]

    assert line(LocalKafka(workdir=tmp_path / "a")) == ["group.initial.rebalance.delay.ms=0"]
    waits = LocalKafka(workdir=tmp_path / "b", group_initial_delay_ms=3000)
    assert line(waits) == ["group.initial.rebalance.delay.ms=3000"]
