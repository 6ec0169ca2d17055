"""kafka-python plumbing shared by producers (trace replay, node agent) and the worker.

Every Kafka client in the project takes its transport security from the settings
(:func:`kafka_client_config` for kafka-python, :func:`aiokafka_client_config` for
aiokafka, :func:`faust_credentials` for the Faust worker): TLS with a CA bundle (and
optionally a client certificate), SASL PLAIN or SCRAM-SHA-256/512, the password a
:class:`~pydantic.SecretStr` until the client gets it.

>>> from gpuhint.wire.config import load_settings
>>> kafka_client_config(load_settings())
{'security_protocol': 'PLAINTEXT'}
"""

from __future__ import annotations

import contextlib
import logging
import re
import socket
import ssl
import struct
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kafka import KafkaProducer
from kafka.admin import KafkaAdminClient, NewTopic
from kafka.errors import KafkaError, TopicAlreadyExistsError

from gpuhint.wire.topics import Topics

if TYPE_CHECKING:
    from gpuhint.wire.config import Settings

log = logging.getLogger(__name__)

_SECRET = re.compile(
    r"""(?P<key>['"]?[\w.-]*(?:password|secret|token)[\w.-]*['"]?\s*[:=]\s*)"""
    r"""(?P<value>'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*"|<[^<>]*>|[^\s,;)}\]]+)""",
    re.IGNORECASE,
)


class RedactSecrets(logging.Filter):
    """Masks the value of every secret-looking key (``sasl_plain_password``,
    ``ssl_password``, ``sasl_oauth_token_provider``...) in a record's message:
    kafka-python logs its whole configuration at DEBUG."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            msg = record.getMessage()
        except Exception:  # a broken format: logging reports it itself
            return True
        masked = _SECRET.sub(_mask, msg)
        if masked != msg:
            record.msg, record.args = masked, None
        return True


def _mask(m: re.Match[str]) -> str:
    value = m.group("value")
    return m.group("key") + (value if value in ("None", "''", '""') else "'***'")


_REDACT = RedactSecrets()


def redact_secrets_in_logs(*handlers: logging.Handler) -> None:
    """Install :class:`RedactSecrets` on every kafka-python logger there is (a logger's
    filter sees only its own records, not its children's) and on ``handlers`` (the root
    logger's see every record). Idempotent; done on import and before each client."""
    names = [n for n in list(logging.root.manager.loggerDict) if n.startswith("kafka.")]
    for name in ["kafka", *names]:
        logging.getLogger(name).addFilter(_REDACT)  # addFilter skips a filter it has
    for handler in handlers:
        handler.addFilter(_REDACT)


redact_secrets_in_logs()


class KafkaUnavailable(RuntimeError):
    """The broker cannot be reached; the message names the address."""


class KafkaSecurityMismatch(KafkaUnavailable):
    """The broker is up but its listener does not match the configured TLS/SASL settings."""


class TopicMismatch(RuntimeError):
    """An existing topic has the wrong number of partitions; the message says which."""


def kafka_client_config(settings: Settings) -> dict[str, Any]:
    """kafka-python keyword arguments for the configured security (secrets revealed here)."""
    config: dict[str, Any] = {"security_protocol": settings.kafka_security_protocol}
    if settings.kafka_security_protocol.startswith("SASL_"):
        assert settings.kafka_sasl_password is not None  # checked by Settings
        config.update(
            sasl_mechanism=settings.kafka_sasl_mechanism,
            sasl_plain_username=settings.kafka_sasl_username,
            sasl_plain_password=settings.kafka_sasl_password.get_secret_value(),
        )
    if settings.kafka_security_protocol.endswith("SSL"):
        config["ssl_check_hostname"] = settings.kafka_ssl_check_hostname
        if settings.kafka_ssl_cafile is not None:
            config["ssl_cafile"] = str(settings.kafka_ssl_cafile)
        if settings.kafka_ssl_certfile is not None:
            config["ssl_certfile"] = str(settings.kafka_ssl_certfile)
            config["ssl_keyfile"] = str(settings.kafka_ssl_keyfile)
    return config


def aiokafka_client_config(settings: Settings) -> dict[str, Any]:
    """The same security options in aiokafka's terms (its TLS is an ``ssl_context``)."""
    config = {k: v for k, v in kafka_client_config(settings).items() if not k.startswith("ssl_")}
    ctx = ssl_context(settings)
    if ctx is not None:
        config["ssl_context"] = ctx
    return config


def ssl_context(settings: Settings) -> ssl.SSLContext | None:
    """A verifying TLS context for the configured CA/client certificate, or None without TLS."""
    if not settings.kafka_security_protocol.endswith("SSL"):
        return None
    cafile = str(settings.kafka_ssl_cafile) if settings.kafka_ssl_cafile else None
    ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=cafile)
    ctx.check_hostname = settings.kafka_ssl_check_hostname
    if settings.kafka_ssl_certfile is not None:
        ctx.load_cert_chain(str(settings.kafka_ssl_certfile), str(settings.kafka_ssl_keyfile))
    return ctx


def faust_credentials(settings: Settings) -> Any:
    """Faust's ``broker_credentials`` for the configured security (None for PLAINTEXT)."""
    import faust

    proto = settings.kafka_security_protocol
    if proto == "PLAINTEXT":
        return None
    ctx = ssl_context(settings)
    if proto == "SSL":
        return faust.SSLCredentials(ctx)
    assert settings.kafka_sasl_password is not None  # checked by Settings
    creds = faust.SASLCredentials(
        username=settings.kafka_sasl_username,
        password=settings.kafka_sasl_password.get_secret_value(),
        ssl_context=ctx,
        mechanism=settings.kafka_sasl_mechanism,
    )
    return creds


def start_kafka_hint() -> str:
    """How to get a broker: the repository's script in a source checkout, else the docs."""
    script = Path(__file__).resolve().parents[1] / "scripts" / "kafka" / "run-kafka.sh"
    if script.is_file():
        return "is Kafka running? see scripts/kafka/run-kafka.sh"
    return "is Kafka running? start a broker, or see docs/operations.md"


_TLS_RECORD = (b"\x15\x03", b"\x16\x03")  # a TLS alert or handshake record
_SASL_ERRORS = {33: "UNSUPPORTED_SASL_MECHANISM", 34: "ILLEGAL_SASL_STATE"}


class _Closed(Exception):
    """The peer closed the connection."""


def probe_broker(
    bootstrap: str, security: Mapping[str, Any] | None = None, timeout_s: float = 5.0
) -> None:
    """Raise :class:`KafkaSecurityMismatch` quickly if the first bootstrap broker is up
    but does not speak the configured security protocol.

    It connects over TCP; with ``*SSL`` shakes hands in TLS (with the configured CA and
    client certificate); asks for the broker's API versions; with ``SASL_*`` starts the
    SASL handshake (and, for PLAIN, authenticates). Only a clear mismatch raises (TLS
    refused or not spoken, the wrong SASL mechanism, a listener without SASL, rejected
    credentials, an answer that is not Kafka's); a broker that cannot be reached or
    answers ambiguously is left to the Kafka client and its retries. Each step waits
    at most ``timeout_s``.
    """
    security = security or {}
    proto = str(security.get("security_protocol", "PLAINTEXT")).upper()
    first = bootstrap.split(",")[0].strip().removeprefix("kafka://")
    host, _, port_s = first.rpartition(":")
    host = host.strip("[]")
    if not host or not port_s.isdigit():
        return
    where = f"{host}:{port_s}"
    tried = f"GPUHINT_KAFKA_SECURITY_PROTOCOL={proto}"
    if security.get("sasl_mechanism"):
        tried += f" with SASL mechanism {security['sasl_mechanism']}"

    def mismatch(what: str, advice: str) -> KafkaSecurityMismatch:
        return KafkaSecurityMismatch(
            f"the Kafka broker at {where} is up, but the security settings do not match: "
            f"{what} (tried {tried}); {advice}"
        )

    try:
        sock = socket.create_connection((host, int(port_s)), timeout=timeout_s)
    except OSError:
        return  # nothing listens (yet): the client's own retries and message
    with contextlib.closing(sock):
        conn: socket.socket = sock
        if proto.endswith("SSL"):
            conn = _probe_tls(sock, host, security, proto, timeout_s, mismatch)
        try:
            _request(conn, 18, 0, b"")  # ApiVersions v0: every listener answers it
            if proto.startswith("SASL_"):
                _sasl_probe(conn, security, mismatch)
        except KafkaSecurityMismatch:
            raise
        except _NotKafka as exc:
            if exc.head.startswith(_TLS_RECORD):
                tls = "SASL_SSL" if "SASL" in proto else "SSL"
                raise mismatch(
                    "the broker answered in TLS: its listener uses SSL or SASL_SSL",
                    f"set GPUHINT_KAFKA_SECURITY_PROTOCOL={tls} and GPUHINT_KAFKA_SSL_CAFILE",
                ) from None
            raise mismatch(
                f"the answer is not Kafka's (first bytes {exc.head!r})",
                "check that the address is a Kafka listener and its security protocol",
            ) from None
        except ssl.SSLError as exc:  # e.g. the broker wants a client certificate
            raise mismatch(
                f"the broker ended the TLS session ({_why(exc)})",
                "check GPUHINT_KAFKA_SSL_CERTFILE and _KEYFILE (mutual TLS)",
            ) from None
        except (OSError, _Closed):
            return  # closed or silent: ambiguous, left to the client


def _probe_tls(
    sock: socket.socket,
    host: str,
    security: Mapping[str, Any],
    proto: str,
    timeout_s: float,
    mismatch: Callable[[str, str], KafkaSecurityMismatch],
) -> ssl.SSLSocket:
    """The TLS handshake of :func:`probe_broker`; a clear mismatch raises."""
    try:
        ctx = _probe_ssl_context(security)
    except (OSError, ssl.SSLError) as exc:
        raise mismatch(
            f"cannot load the TLS files ({exc})",
            "check GPUHINT_KAFKA_SSL_CAFILE, _CERTFILE and _KEYFILE",
        ) from None
    try:
        return ctx.wrap_socket(sock, server_hostname=host)
    except ssl.SSLCertVerificationError as exc:
        raise mismatch(
            f"its TLS certificate is not trusted ({exc.verify_message or exc})",
            "set GPUHINT_KAFKA_SSL_CAFILE to the CA that signed it "
            "(or GPUHINT_KAFKA_SSL_CHECK_HOSTNAME=false for a name mismatch)",
        ) from None
    except TimeoutError:
        raise mismatch(
            f"no TLS handshake within {timeout_s:g} s (a plaintext listener?)",
            _use_plaintext(proto),
        ) from None
    except (ssl.SSLError, OSError) as exc:
        raise mismatch(
            f"the TLS handshake failed ({_why(exc)}): the listener does not speak TLS",
            _use_plaintext(proto),
        ) from None


def _use_plaintext(proto: str) -> str:
    other = "SASL_PLAINTEXT" if proto.startswith("SASL_") else "PLAINTEXT"
    return f"if the listener is plaintext set GPUHINT_KAFKA_SECURITY_PROTOCOL={other}"


def _why(exc: BaseException) -> str:
    return str(getattr(exc, "reason", None) or exc or type(exc).__name__)


def _probe_ssl_context(security: Mapping[str, Any]) -> ssl.SSLContext:
    ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=security.get("ssl_cafile"))
    ctx.check_hostname = bool(security.get("ssl_check_hostname", True))
    if security.get("ssl_certfile"):
        ctx.load_cert_chain(security["ssl_certfile"], security.get("ssl_keyfile"))
    return ctx


class _NotKafka(Exception):
    def __init__(self, head: bytes) -> None:
        super().__init__(head)
        self.head = head


def _recv(conn: socket.socket, n: int, head: bytes = b"") -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = conn.recv(n - len(buf))
        if not chunk:
            if buf:
                raise _NotKafka(head + bytes(buf))
            raise _Closed
        buf += chunk
    return bytes(buf)


_CORRELATION = 0


def _request(conn: socket.socket, api_key: int, version: int, body: bytes) -> bytes:
    """Send one Kafka request (header v1) and return the response body after its header."""
    global _CORRELATION
    _CORRELATION = (_CORRELATION + 1) % 2**31
    client = b"gpuhint-probe"
    header = struct.pack(">hhih", api_key, version, _CORRELATION, len(client)) + client
    conn.sendall(struct.pack(">i", len(header) + len(body)) + header + body)
    head = _recv(conn, 4)
    (size,) = struct.unpack(">i", head)
    if not 4 <= size <= 1 << 20:
        raise _NotKafka(head)
    data = _recv(conn, size, head)
    if struct.unpack(">i", data[:4])[0] != _CORRELATION:
        raise _NotKafka(head + data[:8])
    return data[4:]


def _sasl_probe(conn: socket.socket, security: Mapping[str, Any], mismatch: Any) -> None:
    mechanism = str(security.get("sasl_mechanism") or "PLAIN")
    name = mechanism.encode()
    body = _request(conn, 17, 1, struct.pack(">h", len(name)) + name)  # SaslHandshake v1
    (error,) = struct.unpack(">h", body[:2])
    if error == 34:  # ILLEGAL_SASL_STATE: the listener has no SASL
        raise mismatch(
            "the listener does not use SASL",
            "set GPUHINT_KAFKA_SECURITY_PROTOCOL="
            f"{'SSL' if str(security.get('security_protocol')).endswith('SSL') else 'PLAINTEXT'}",
        )
    if error == 33:
        enabled = _strings(body[2:])
        raise mismatch(
            f"the broker does not enable SASL mechanism {mechanism} "
            f"(it enables {', '.join(enabled) or 'none'})",
            "set GPUHINT_KAFKA_SASL_MECHANISM to one of those",
        )
    if error != 0 or mechanism != "PLAIN":
        return  # SCRAM's exchange is left to the client
    user = str(security.get("sasl_plain_username") or "").encode()
    password = str(security.get("sasl_plain_password") or "").encode()
    token = b"\0" + user + b"\0" + password
    try:
        body = _request(conn, 36, 0, struct.pack(">i", len(token)) + token)  # SaslAuthenticate
    except _Closed:
        return
    (error,) = struct.unpack(">h", body[:2])
    if error != 0:
        (n,) = struct.unpack(">h", body[2:4])
        reason = body[4 : 4 + n].decode(errors="replace") if n > 0 else f"error {error}"
        raise mismatch(
            f"SASL authentication failed ({reason})",
            "check GPUHINT_KAFKA_SASL_USERNAME, _PASSWORD and _MECHANISM",
        )


def _strings(data: bytes) -> list[str]:
    """A Kafka ``ARRAY[STRING]`` (best effort)."""
    out: list[str] = []
    with contextlib.suppress(struct.error):
        (count,) = struct.unpack(">i", data[:4])
        pos = 4
        for _ in range(max(0, min(count, 32))):
            (n,) = struct.unpack(">h", data[pos : pos + 2])
            out.append(data[pos + 2 : pos + 2 + n].decode(errors="replace"))
            pos += 2 + n
    return out


@contextlib.contextmanager
def _admin(
    bootstrap: str, timeout_s: float, security: Mapping[str, Any] | None = None
) -> Iterator[KafkaAdminClient]:
    """An admin client whose Kafka errors become :class:`KafkaUnavailable`.

    A broker that is up but speaks another security protocol fails fast
    (:func:`probe_broker`), not after ``timeout_s``.
    """
    probe_broker(bootstrap, security, min(timeout_s, 5.0))
    redact_secrets_in_logs()  # loggers of kafka modules imported since
    try:
        admin = KafkaAdminClient(
            bootstrap_servers=bootstrap,
            client_id="gpuhint-admin",
            request_timeout_ms=int(timeout_s * 1000),
            bootstrap_timeout_ms=int(timeout_s * 1000),  # kafka-python 3 waits 30 s otherwise
            **(security or {}),
        )
    except KafkaError as exc:
        raise KafkaUnavailable(f"no Kafka broker answers at {bootstrap} ({exc})") from None
    try:
        yield admin
    except KafkaError as exc:
        raise KafkaUnavailable(f"Kafka at {bootstrap}: {exc}") from None
    finally:
        admin.close()


def ensure_topics(
    bootstrap: str,
    topics: Topics,
    partitions: int,
    timeout_s: float = 30.0,
    replication_factor: int = 1,
    security: Mapping[str, Any] | None = None,
    check: tuple[str, ...] = (),
) -> None:
    """Create gpuhint's topics if missing, with ``partitions`` partitions each.

    The job-event topic's partition count must equal the worker's (its tables are
    co-partitioned with it), so both read the same ``GPUHINT_PARTITIONS`` setting.
    Topics named in ``check`` that already exist with another partition count raise
    :class:`TopicMismatch` (nothing has been consumed yet).
    """
    with _admin(bootstrap, timeout_s, security) as admin:
        existing = set(admin.list_topics())
        wanted = [
            NewTopic(name=t, num_partitions=partitions, replication_factor=replication_factor)
            for t in topics.all()
            if t not in existing
        ]
        if wanted:
            try:
                admin.create_topics(wanted)
            except TopicAlreadyExistsError:  # a concurrent creator won: its count is checked
                existing.update(t.name for t in wanted)
            else:
                log.info("created topics %s", ", ".join(t.name for t in wanted))
        present = [t for t in check if t in existing]
        if present:
            for desc in admin.describe_topics(present):
                found = len(desc["partitions"])
                if found != partitions:
                    raise TopicMismatch(
                        f"topic {desc.get('topic') or desc.get('name')} has {found} partitions "
                        f"but GPUHINT_PARTITIONS="
                        f"{partitions}: the worker's tables must be co-partitioned with it; "
                        "set GPUHINT_PARTITIONS to match"
                    )


def make_producer(
    bootstrap: str, security: Mapping[str, Any] | None = None, **overrides: Any
) -> KafkaProducer:
    """A producer that waits for the broker's ack (acks=all) and batches briefly."""
    config: dict[str, Any] = {
        "bootstrap_servers": bootstrap,
        "client_id": "gpuhint",
        "acks": "all",
        "linger_ms": 5,
        "retries": 5,
        "max_in_flight_requests_per_connection": 1,  # keep per-partition order on retry
        **(security or {}),
    }
    config.update(overrides)
    probe_broker(bootstrap, config, 5.0)
    redact_secrets_in_logs()
    try:
        return KafkaProducer(**config)
    except KafkaError as exc:
        raise KafkaUnavailable(f"no Kafka broker answers at {bootstrap} ({exc})") from None


def topic_partitions(
    bootstrap: str, topic: str, timeout_s: float = 30.0, security: Mapping[str, Any] | None = None
) -> int | None:
    """Number of partitions of ``topic``, or None if it does not exist."""
    with _admin(bootstrap, timeout_s, security) as admin:
        if topic not in set(admin.list_topics()):
            return None
        desc = admin.describe_topics([topic])
        return len(desc[0]["partitions"])
