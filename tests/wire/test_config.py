from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from gpuhint.wire.config import ConfigError, load_settings


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
    with pytest.raises(ConfigError, match="is a directory, not a TOML file"):
        load_settings(tmp_path)
    bad = tmp_path / "bad.toml"
    bad.write_text("cluster = \n")
    with pytest.raises(ConfigError):
        load_settings(bad)
    unknown = tmp_path / "unknown.toml"
    unknown.write_text('colour = "red"\n')
    with pytest.raises(ConfigError, match="colour"):
        load_settings(unknown)


def _cli_error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """What the CLI prints for a bad configuration (the same path every command takes)."""
    from gpuhint.cli import main

    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "?:" not in err
    return err


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    import os

    for name in list(os.environ):
        if name.upper().startswith("GPUHINT_"):
            monkeypatch.delenv(name)
    return monkeypatch


def test_env_errors_name_the_variable(
    clean_env: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    clean_env.setenv("GPUHINT_PARTITIONS", "abc")
    err = _cli_error(["hints", "--redis-url", "redis://127.0.0.1:1/0"], capsys)
    assert "GPUHINT_PARTITIONS (partitions): Input should be a valid integer" in err


@pytest.mark.parametrize(
    ("env", "named"),
    [
        (
            {"GPUHINT_KAFKA_SECURITY_PROTOCOL": "SASL_SSL"},
            ["GPUHINT_KAFKA_SECURITY_PROTOCOL", "GPUHINT_KAFKA_SASL_MECHANISM (not set)"],
        ),
        (
            {"GPUHINT_KAFKA_SASL_USERNAME": "u"},
            ["GPUHINT_KAFKA_SECURITY_PROTOCOL (not set)", "GPUHINT_KAFKA_SASL_USERNAME"],
        ),
        (
            {"GPUHINT_KAFKA_SECURITY_PROTOCOL": "SSL", "GPUHINT_KAFKA_SSL_CAFILE": "/nonexistent"},
            ["GPUHINT_KAFKA_SSL_CAFILE (kafka_ssl_cafile): /nonexistent is not a readable file"],
        ),
    ],
)
def test_checks_across_settings_name_them(
    clean_env: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    env: dict[str, str],
    named: list[str],
) -> None:
    for k, v in env.items():
        clean_env.setenv(k, v)
    with pytest.raises(ConfigError) as exc:
        load_settings()
    for name in named:
        assert name in str(exc.value)
    err = _cli_error(["hints"], capsys)
    for name in named:
        assert name in err


def test_file_errors_name_the_key_file_and_line(
    tmp_path: Path, clean_env: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = tmp_path / "g.toml"
    cfg.write_text('# settings\ncluster = "c1"\npartitions = "many"\nkafka_retry_s = -1\n')
    err = _cli_error(["hints", "--config", str(cfg)], capsys)
    assert f"partitions ({cfg}, line 3): Input should be a valid integer" in err
    assert f"kafka_retry_s ({cfg}, line 4): Input should be greater than or equal to 0" in err
    cfg.write_text('kafka_security_protocol = "SASL_PLAINTEXT"\n')
    err = _cli_error(["hints", "--config", str(cfg)], capsys)
    assert f"kafka_security_protocol ({cfg}, line 1)" in err and "needs" in err
    clean_env.setenv("GPUHINT_PARTITIONS", "0")  # the environment wins over the file
    cfg.write_text("partitions = 4\n")
    err = _cli_error(["hints", "--config", str(cfg)], capsys)
    assert "GPUHINT_PARTITIONS (partitions): Input should be greater than or equal to 1" in err


def test_flag_errors_name_the_flag_setting(clean_env: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigError, match=r"cluster \(flag\): String should match"):
        load_settings(cluster="a b")


@pytest.mark.parametrize(
    "url",
    [
        "redis://:HEADPW/TAILPW@redis:6379/0",  # a '/' in the password (base64 makes them)
        "redis://user:HEADPW?TAILPW@redis:6379/0",
        "redis://:HEADPW#TAILPW@redis:6379/0",
    ],
)
def test_a_password_with_url_delimiters_is_refused_without_echoing_it(
    clean_env: pytest.MonkeyPatch, url: str
) -> None:
    """A '/', '?' or '#' in the password ends the URL's netloc early: the rest of the
    password lands in the path, query or fragment. Refused (else Redis is asked at the
    wrong host with a truncated password), and the message names no part of it."""
    clean_env.setenv("GPUHINT_REDIS_URL", url)
    with pytest.raises(ConfigError) as err:
        load_settings()
    text = str(err.value)
    assert "TAILPW" not in text and "HEADPW" not in text
    assert "percent-encode" in text


@pytest.mark.parametrize("protocol", [None, "SASL_PLAINTEXT"])
def test_tls_files_without_a_tls_protocol_are_refused(
    clean_env: pytest.MonkeyPatch, tmp_path: Path, protocol: str | None
) -> None:
    """A CA file and a protocol without TLS: the client would silently talk in plaintext
    (as SASL settings without a SASL protocol, it is refused)."""
    ca = tmp_path / "ca.pem"
    ca.write_text("x")
    clean_env.setenv("GPUHINT_KAFKA_SSL_CAFILE", str(ca))
    if protocol:
        clean_env.setenv("GPUHINT_KAFKA_SECURITY_PROTOCOL", protocol)
        clean_env.setenv("GPUHINT_KAFKA_SASL_MECHANISM", "PLAIN")
        clean_env.setenv("GPUHINT_KAFKA_SASL_USERNAME", "u")
        clean_env.setenv("GPUHINT_KAFKA_SASL_PASSWORD", "p")
    with pytest.raises(ConfigError, match="GPUHINT_KAFKA_SSL_CAFILE") as err:
        load_settings()
    assert "use SSL or SASL_SSL" in str(err.value)
    clean_env.setenv("GPUHINT_KAFKA_SECURITY_PROTOCOL", "SASL_SSL" if protocol else "SSL")
    assert load_settings().kafka_ssl_cafile == ca
