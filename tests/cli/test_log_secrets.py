"""No secret reaches a log line, even at DEBUG (review 2026-12-07).

kafka-python's admin client logs its whole configuration at DEBUG, SASL password
included; ``gpuhint -v`` turns DEBUG on for it.
"""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator

import pytest

from gpuhint.wire.topics import Topics
from streams.kafka_io import RedactSecrets, ensure_topics

SECRET = "hunter2-SECRET"


@pytest.fixture
def debug_log() -> Iterator[io.StringIO]:
    """Every record at DEBUG, as ``gpuhint -v`` writes them (a root handler)."""
    buf = io.StringIO()
    handler = logging.StreamHandler(buf)
    root, kafka = logging.getLogger(), logging.getLogger("kafka")
    levels = root.level, kafka.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    kafka.setLevel(logging.DEBUG)
    try:
        yield buf
    finally:
        root.removeHandler(handler)
        root.setLevel(levels[0])
        kafka.setLevel(levels[1])


def test_the_admin_clients_configuration_is_logged_without_the_password(
    debug_log: io.StringIO,
) -> None:
    security = {
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "PLAIN",
        "sasl_plain_username": "agent",
        "sasl_plain_password": SECRET,
    }
    with pytest.raises(Exception, match=r"127\.0\.0\.1:1"):
        ensure_topics("127.0.0.1:1", Topics(), 1, timeout_s=1, security=security)
    out = debug_log.getvalue()
    assert "Starting KafkaAdminClient with configuration" in out  # it was logged ...
    assert SECRET not in out and "'sasl_plain_password': '***'" in out  # ... masked


@pytest.mark.parametrize(
    ("message", "masked"),
    [
        ("{'ssl_password': 'p\\'w', 'x': 1}", "{'ssl_password': '***', 'x': 1}"),
        ('{"sasl_plain_password": "pw"}', "{\"sasl_plain_password\": '***'}"),
        ("sasl_oauth_token_provider=<Tok at 0x1> ok", "sasl_oauth_token_provider='***' ok"),
        ("{'sasl_plain_password': None}", "{'sasl_plain_password': None}"),
        ("no secret here: 42", "no secret here: 42"),
    ],
)
def test_secret_values_are_masked(message: str, masked: str) -> None:
    rec = logging.LogRecord("kafka.x", logging.DEBUG, __file__, 1, "%s", (message,), None)
    assert RedactSecrets().filter(rec) and rec.getMessage() == masked


def test_verbose_cli_masks_secrets_of_loggers_made_later(debug_log: io.StringIO) -> None:
    from gpuhint.cli import _redact_secrets

    _redact_secrets()  # what `gpuhint -v` does once logging is set up
    late = logging.getLogger("kafka.imported.later")  # no filter of its own
    late.debug("config: %s", {"sasl_plain_password": SECRET})
    assert SECRET not in debug_log.getvalue() and "'***'" in debug_log.getvalue()


@pytest.mark.parametrize(("argv", "env", "masked"), [
    (["-v"], "INFO", True),
    ([], "DEBUG", True),  # before: only -v masked, GPUHINT_LOG_LEVEL=DEBUG did not
    ([], "INFO", False),
])  # fmt: skip
def test_debug_from_the_environment_masks_secrets_as_verbose_does(
    monkeypatch: pytest.MonkeyPatch, argv: list[str], env: str, masked: bool
) -> None:
    import gpuhint.cli as cli

    calls: list[int] = []
    monkeypatch.setattr(cli, "_redact_secrets", lambda: calls.append(1))
    monkeypatch.setenv("GPUHINT_LOG_LEVEL", env)
    assert cli.main([*argv, "analyze", "/nonexistent/trace.csv"]) == 2
    assert bool(calls) is masked
