"""The TOML file carries every command's settings ([slurm], [kueue], slurm_*), the example
file in deploy/ loads, and a misspelt GPUHINT_* variable is reported."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

import pytest

from gpuhint.cli.common import UserError, command_env_names, section_settings, warn_unknown_env
from gpuhint.kueue.settings import KueueSettings, load_kueue_settings
from gpuhint.slurm.settings import SlurmSettings, load_slurm_settings
from gpuhint.wire.command_config import section_values, unknown_env
from gpuhint.wire.config import ConfigError, load_settings

EXAMPLE = Path(__file__).resolve().parents[2] / "deploy" / "gpuhint.example.toml"
SLURM = set(SlurmSettings.model_fields)


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    for name in list(os.environ):
        if name.upper().startswith("GPUHINT_"):
            monkeypatch.delenv(name)


def _args(path: Path) -> argparse.Namespace:
    return argparse.Namespace(config=str(path))


def test_the_example_file_loads_for_every_command() -> None:
    settings = load_settings(EXAMPLE)
    assert settings.cluster == "prod" and settings.replication_factor == 3
    slurm = load_slurm_settings(**section_settings(_args(EXAMPLE), "slurm", SLURM))
    assert slurm.max_factor == 100_000 and slurm.exclude_nodes == ""
    kueue = load_kueue_settings(
        **section_settings(_args(EXAMPLE), "kueue", set(KueueSettings.model_fields))
    )
    assert kueue.classes == 10
    # every key it sets is one the settings read (it documents, not invents)
    assert set(section_values(EXAMPLE, "slurm")) <= SLURM


def test_slurm_section_and_prefixed_keys(tmp_path: Path) -> None:
    f = tmp_path / "g.toml"
    f.write_text('cluster = "c1"\nslurm_rate = 500\n[slurm]\nmin_idle = 3\n')
    assert load_settings(f).cluster == "c1"  # the common settings ignore the section
    values = section_settings(_args(f), "slurm", SLURM, max_updates=7)
    assert values == {"rate": 500, "min_idle": 3, "max_updates": 7}
    assert load_slurm_settings(**values).rate == 500


def test_precedence_flag_then_env_then_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    f = tmp_path / "g.toml"
    f.write_text("[slurm]\nrate = 500\nmin_idle = 3\n")
    monkeypatch.setenv("GPUHINT_SLURM_RATE", "900")
    values = section_settings(_args(f), "slurm", SLURM, min_idle=5)
    assert values == {"min_idle": 5}  # rate left to the environment
    assert load_slurm_settings(**values).rate == 900


def test_a_misspelt_section_key_is_an_error_with_a_guess(tmp_path: Path) -> None:
    f = tmp_path / "g.toml"
    f.write_text("[slurm]\nmin_idel = 3\n")
    with pytest.raises(UserError, match=r"min_idel is not a setting.*did you mean min_idle"):
        section_settings(_args(f), "slurm", SLURM)


def test_both_spellings_of_one_key_are_an_error(tmp_path: Path) -> None:
    f = tmp_path / "g.toml"
    f.write_text("slurm_rate = 1\n[slurm]\nrate = 2\n")
    with pytest.raises(ConfigError, match="both set"):
        section_values(f, "slurm")


def test_other_tables_are_still_refused(tmp_path: Path) -> None:
    f = tmp_path / "g.toml"
    f.write_text("[worker]\npartitions = 3\n")
    with pytest.raises(ConfigError, match="worker"):
        load_settings(f)


def test_unknown_gpuhint_variables_are_named_with_a_guess(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("GPUHINT_KAFKA_RETRY", "5")
    monkeypatch.setenv("GPUHINT_SLURM_RATES", "5")
    monkeypatch.setenv("GPUHINT_CLUSTER", "ok")  # known: not reported
    monkeypatch.setenv("GPUHINT_TEST_REDIS_URL", "redis://x")  # the test suite's: not reported
    with caplog.at_level(logging.WARNING):
        assert warn_unknown_env(logging.getLogger("t")) == 2
    assert "GPUHINT_KAFKA_RETRY is not a gpuhint setting" in caplog.text
    assert "did you mean GPUHINT_KAFKA_RETRY_S?" in caplog.text
    assert "did you mean GPUHINT_SLURM_RATE?" in caplog.text


def test_every_name_the_deploy_files_use_is_known() -> None:
    import re

    root = EXAMPLE.parents[1]
    names = set()
    for path in [root / "docker-compose.yml", *root.glob("deploy/**/*")]:
        if path.is_file():
            names |= set(
                re.findall(r"GPUHINT_[A-Z0-9_]*[A-Z0-9](?![A-Z0-9_]*\*)", path.read_text())
            )
    assert names, "no GPUHINT_* names found"
    assert unknown_env(command_env_names(), dict.fromkeys(names, "")) == []
