from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from gpuhint.config import ConfigError, load_settings


def test_precedence_flags_over_env_over_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = tmp_path / "g.toml"
    cfg.write_text('cluster = "from-file"\npartitions = 3\nkafka_bootstrap = "file:9092"\n')
    monkeypatch.setenv("GPUHINT_PARTITIONS", "5")
    s = load_settings(cfg, kafka_bootstrap="flag:9092")
    assert (s.cluster, s.partitions, s.kafka_bootstrap) == ("from-file", 5, "flag:9092")
    monkeypatch.setenv("GPUHINT_CONFIG", str(cfg))
    assert load_settings().cluster == "from-file"


def test_settings_are_frozen_and_the_secret_stays_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUHINT_REDIS_URL", "redis://:hunter2@r:6379/0")
    s = load_settings()
    assert "hunter2" not in repr(s) and "hunter2" not in str(s.model_dump())
    assert s.redis_url.get_secret_value().endswith("@r:6379/0")
    with pytest.raises(ValidationError):
        s.cluster = "x"  # type: ignore[misc]


@pytest.mark.parametrize(
    ("env", "field"),
    [("GPUHINT_PARTITIONS", "partitions"), ("GPUHINT_TOPIC_PREFIX", "topic_prefix")],
)
def test_bad_values_name_the_field(monkeypatch: pytest.MonkeyPatch, env: str, field: str) -> None:
    monkeypatch.setenv(env, "not valid!")
    with pytest.raises(ConfigError) as err:
        load_settings()
    assert field in str(err.value)


def test_bad_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_settings(tmp_path / "missing.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("cluster = \n")
    with pytest.raises(ConfigError):
        load_settings(bad)
    unknown = tmp_path / "unknown.toml"
    unknown.write_text('colour = "red"\n')
    with pytest.raises(ConfigError, match="colour"):
        load_settings(unknown)
