"""docker-compose.yml and the systemd units, checked as far as a machine without Docker
allows: the compose file is parsed (every gpuhint service builds, has a /healthz check on
the port it serves, Redis wants a password the services use, the broker keeps Kafka's
group delay); the units pass ``systemd-analyze verify`` (else parse) and run from a
virtualenv whose docs they point at."""

from __future__ import annotations

import configparser
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
UNITS = [
    *sorted((ROOT / "deploy" / "systemd").glob("*.service")),
    ROOT / "deploy" / "gpuhint-agent.service",
]
VENV_BIN = "/opt/gpuhint/venv/bin/gpuhint"


def _compose() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    return data


def _gpuhint_services() -> dict[str, dict[str, Any]]:
    return {
        name: svc
        for name, svc in _compose()["services"].items()
        if str(svc.get("image", "")).startswith("gpuhint")
    }


def test_every_gpuhint_service_builds_the_image_it_names() -> None:
    services = _gpuhint_services()
    assert {"worker", "agent", "replay"} <= set(services)
    for name, svc in services.items():
        assert "build" in svc or svc.get("pull_policy") == "build", name


def test_long_running_services_are_checked_on_the_healthz_they_serve() -> None:
    for name, svc in _gpuhint_services().items():
        if "tools" in svc.get("profiles", []):
            continue  # one-shot commands (replay, cli)
        env = svc["environment"]
        port = env.get("GPUHINT_METRICS_PORT")
        assert port, f"{name} serves no /healthz"
        test = " ".join(svc["healthcheck"]["test"])
        assert f"127.0.0.1:{port}/healthz" in test, (name, test)


def test_redis_wants_a_password_and_the_services_use_it() -> None:
    services = _compose()["services"]
    redis = services["redis"]
    command = " ".join(redis["command"])
    assert "--requirepass" in command
    secret = "${GPUHINT_REDIS_PASSWORD:?"
    assert str(redis["environment"]["REDISCLI_AUTH"]).startswith(secret)
    assert "--requirepass" in command and "REDISCLI_AUTH" in command
    for port in redis.get("ports", []):
        assert str(port).startswith("127.0.0.1:"), port  # not on every interface
    for name, svc in _gpuhint_services().items():
        url = str(svc["environment"]["GPUHINT_REDIS_URL"])
        assert re.match(r"redis://:\$\{GPUHINT_REDIS_PASSWORD:\?[^}]*\}@redis:", url), name


def test_the_broker_keeps_kafkas_group_delay() -> None:
    kafka = _compose()["services"]["kafka"]["environment"]
    assert "KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS" not in kafka


def _unit(path: Path) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string(path.read_text())
    return parser


@pytest.mark.parametrize("path", UNITS, ids=lambda p: p.name)
def test_units_run_from_a_virtualenv_and_point_at_installed_docs(path: Path) -> None:
    text = path.read_text()
    unit = _unit(path)
    assert unit["Service"]["ExecStart"].startswith(VENV_BIN + " ")
    assert "sudo pip install" not in text  # PEP 668 refuses it on Debian 12 / Ubuntu 24.04
    assert "python3 -m venv /opt/gpuhint/venv" in text
    assert "cp docs/*.md /opt/gpuhint/docs/" in text
    for uri in unit["Unit"]["Documentation"].split():
        doc = uri.removeprefix("file:///opt/gpuhint/docs/")
        assert doc != uri and (ROOT / "docs" / doc).is_file(), uri
    assert {"Unit", "Service", "Install"} <= set(unit.sections())


@pytest.mark.parametrize("path", UNITS, ids=lambda p: p.name)
def test_units_pass_systemd_analyze_verify(path: Path, tmp_path: Path) -> None:
    """Verified with ExecStart pointed at a stand-in (the venv is not on this machine);
    any warning (unknown key, bad value) fails."""
    tool = shutil.which("systemd-analyze")
    if tool is None:  # parsed only (test above)
        pytest.skip("systemd-analyze not installed")
    stand_in = tmp_path / "gpuhint"
    stand_in.write_text("#!/bin/sh\n")
    stand_in.chmod(0o755)
    copy = tmp_path / path.name
    copy.write_text(path.read_text().replace(VENV_BIN, str(stand_in)))
    proc = subprocess.run([tool, "verify", str(copy)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and not proc.stderr.strip(), proc.stderr
