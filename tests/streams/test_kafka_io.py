"""Fast, classified failures when the broker is up but its security protocol differs.

Local socket servers stand in for brokers (no Kafka needed): one that says nothing,
one that hangs up on a TLS hello (a plaintext Kafka listener), one that sends garbage
or TLS, and a minimal Kafka that answers the SASL handshake.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pytest
from kafka.errors import TopicAlreadyExistsError

from gpuhint.wire.topics import Topics
from streams import kafka_io
from streams.kafka_io import (
    KafkaSecurityMismatch,
    KafkaUnavailable,
    TopicMismatch,
    ensure_topics,
    probe_broker,
    start_kafka_hint,
)

SASL_SSL = {
    "security_protocol": "SASL_SSL",
    "sasl_mechanism": "SCRAM-SHA-512",
    "sasl_plain_username": "u",
    "sasl_plain_password": "s3cret",
    "ssl_check_hostname": True,
}


@pytest.fixture
def server() -> Iterator[Callable[[Callable[[socket.socket], None]], str]]:
    """Start a TCP server on 127.0.0.1 whose connections ``handle`` serves; gives HOST:PORT."""
    socks: list[socket.socket] = []

    def start(handle: Callable[[socket.socket], None]) -> str:
        srv = socket.create_server(("127.0.0.1", 0))
        socks.append(srv)

        def loop() -> None:
            while True:
                try:
                    conn, _ = srv.accept()
                except OSError:
                    return
                socks.append(conn)
                threading.Thread(target=handle, args=(conn,), daemon=True).start()

        threading.Thread(target=loop, daemon=True).start()
        return f"127.0.0.1:{srv.getsockname()[1]}"

    yield start
    for s in socks:
        s.close()


def silent(conn: socket.socket) -> None:
    time.sleep(30)


def hang_up(conn: socket.socket) -> None:  # what a plaintext Kafka does with a TLS hello
    conn.recv(4096)
    conn.close()


def garbage(conn: socket.socket) -> None:
    conn.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n")
    time.sleep(5)


def tls_alert(conn: socket.socket) -> None:  # a TLS listener refusing a plaintext request
    conn.recv(4096)
    conn.sendall(b"\x15\x03\x03\x00\x02\x02\x46")
    time.sleep(5)


def mini_kafka(sasl_error: int, auth_error: int = 0) -> Callable[[socket.socket], None]:
    """Answers ApiVersions, SaslHandshake (``sasl_error``) and SaslAuthenticate."""

    def handle(conn: socket.socket) -> None:
        # the listener closes the socket at teardown, perhaps mid-recv: not a failure
        with conn, contextlib.suppress(OSError):
            while True:
                head = conn.recv(4)
                if len(head) < 4:
                    return
                (size,) = struct.unpack(">i", head)
                req = b""
                while len(req) < size:
                    req += conn.recv(size - len(req))
                api_key, _, corr = struct.unpack(">hhi", req[:8])
                if api_key == 18:
                    body = struct.pack(">hi", 0, 0)
                elif api_key == 17:
                    mechs = [b"PLAIN", b"SCRAM-SHA-256"] if sasl_error == 33 else []
                    body = struct.pack(">hi", sasl_error, len(mechs))
                    body += b"".join(struct.pack(">h", len(m)) + m for m in mechs)
                else:  # 36, SaslAuthenticate
                    msg = b"Authentication failed: Invalid username or password"
                    body = struct.pack(">hh", auth_error, len(msg)) + msg + struct.pack(">i", 0)
                out = struct.pack(">i", corr) + body
                conn.sendall(struct.pack(">i", len(out)) + out)

    return handle


def _mismatch(bootstrap: str, security: Mapping[str, object], timeout_s: float = 2.0) -> str:
    t0 = time.monotonic()
    with pytest.raises(KafkaSecurityMismatch) as err:
        probe_broker(bootstrap, security, timeout_s)
    assert time.monotonic() - t0 < timeout_s + 2
    text = str(err.value)
    assert f"broker at {bootstrap} is up, but the security settings do not match" in text
    assert "GPUHINT_KAFKA_SECURITY_PROTOCOL" in text
    assert "s3cret" not in text
    return text


@pytest.mark.parametrize("handle", [silent, hang_up, garbage], ids=lambda f: f.__name__)
def test_tls_against_a_plaintext_server_says_so_quickly(
    server: Callable[..., str], handle: Callable[[socket.socket], None]
) -> None:
    bootstrap = server(handle)
    text = _mismatch(bootstrap, SASL_SSL, timeout_s=1.0)
    assert (
        "tried GPUHINT_KAFKA_SECURITY_PROTOCOL=SASL_SSL with SASL mechanism SCRAM-SHA-512" in text
    )
    assert "TLS" in text and "GPUHINT_KAFKA_SECURITY_PROTOCOL=SASL_PLAINTEXT" in text
    assert "is Kafka running" not in text


def test_ensure_topics_fails_fast_not_after_its_timeout(server: Callable[..., str]) -> None:
    bootstrap = server(hang_up)
    t0 = time.monotonic()
    with pytest.raises(KafkaUnavailable, match="security settings do not match"):
        ensure_topics(bootstrap, Topics("t"), 1, timeout_s=30.0, security=SASL_SSL)
    assert time.monotonic() - t0 < 5


def test_plaintext_against_tls_or_non_kafka(server: Callable[..., str]) -> None:
    plain = {"security_protocol": "PLAINTEXT"}
    text = _mismatch(server(tls_alert), plain)
    assert "answered in TLS" in text and "GPUHINT_KAFKA_SECURITY_PROTOCOL=SSL" in text
    text = _mismatch(server(garbage), plain)
    assert "not Kafka's" in text


def test_sasl_handshake_failures_are_named(server: Callable[..., str]) -> None:
    sasl = {**SASL_SSL, "security_protocol": "SASL_PLAINTEXT"}
    text = _mismatch(server(mini_kafka(34)), sasl)
    assert "does not use SASL" in text and "=PLAINTEXT" in text
    text = _mismatch(server(mini_kafka(33)), sasl)
    assert "SCRAM-SHA-512" in text and "PLAIN, SCRAM-SHA-256" in text
    assert "GPUHINT_KAFKA_SASL_MECHANISM" in text
    plain = {**sasl, "sasl_mechanism": "PLAIN"}
    text = _mismatch(server(mini_kafka(0, auth_error=58)), plain)
    assert "SASL authentication failed" in text and "Invalid username or password" in text
    probe_broker(server(mini_kafka(0)), plain, 2.0)  # all well: nothing raised
    probe_broker(server(mini_kafka(0)), {"security_protocol": "PLAINTEXT"}, 2.0)


def test_nothing_listening_is_left_to_the_client() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    t0 = time.monotonic()
    probe_broker(f"127.0.0.1:{port}", SASL_SSL, 2.0)  # no exception: not a mismatch
    assert time.monotonic() - t0 < 2


def test_start_kafka_hint_names_the_script_only_in_a_checkout() -> None:
    from pathlib import Path

    import streams.kafka_io as kio

    script = Path(kio.__file__).resolve().parents[1] / "scripts/kafka/run-kafka.sh"
    hint = start_kafka_hint()
    assert ("run-kafka.sh" in hint) == script.is_file()
    assert "run-kafka.sh" in hint or "docs/operations.md" in hint


class _RacedAdmin:
    """An admin whose topics another process creates between its look and its create
    (another worker or a replay with another partition count)."""

    def list_topics(self) -> list[str]:
        return []  # not there when looked at ...

    def create_topics(self, topics: Any) -> None:
        raise TopicAlreadyExistsError()  # ... there when created

    def describe_topics(self, names: list[str]) -> list[dict[str, Any]]:
        return [{"topic": n, "partitions": [{}, {}, {}]} for n in names]


def test_a_topic_created_meanwhile_with_other_partitions_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    @contextlib.contextmanager
    def admin(*args: Any, **kwargs: Any) -> Iterator[_RacedAdmin]:
        yield _RacedAdmin()

    monkeypatch.setattr(kafka_io, "_admin", admin)
    topics = Topics("raced")
    with pytest.raises(TopicMismatch, match=r"raced\.job-events has 3 partitions"):
        ensure_topics("127.0.0.1:1", topics, 4, check=(topics.job_events,))


def test_the_changelog_topics_checked_are_the_ones_faust_writes() -> None:
    """The worker refuses changelog topics left over from another GPUHINT_PARTITIONS
    (a VC's state would be restored by another worker): the names it checks must be the
    names Faust gives its tables' changelogs."""
    from gpuhint.wire.config import Settings
    from streams.faust_io import Channels, changelog_topics, make_faust_app

    settings = Settings(app_id="site-a")
    channels = Channels.of(make_faust_app(settings), settings)
    faust_names = tuple(
        t.table.changelog_topic.get_topic_name() for t in (channels.vc_table, channels.ces_table)
    )
    assert (
        changelog_topics(settings)
        == faust_names
        == (
            "site-a-vc-state-changelog",
            "site-a-ces-state-changelog",
        )
    )
