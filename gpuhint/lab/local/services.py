"""Start a real Apache Kafka broker (KRaft) and a real Redis server on free loopback ports.

Used by the test fixtures, the benchmarks and ``scripts/kafka/run-kafka.sh``. Kafka's
jars come from Maven Central (``scripts/kafka/fetch.sh``); Redis is Debian's
``redis-server``. Each server runs in a temporary directory and is stopped on exit.

    python -m gpuhint.lab.local.services kafka --port 9092 [--secure]
    python -m gpuhint.lab.local.services redis --port 6379 [--password P [--user U]] [--tls]

Data is temporary unless ``GPUHINT_KAFKA_DATA`` / ``GPUHINT_REDIS_DATA`` name a directory
to keep it in (then Kafka's topics, offsets and changelogs survive a restart; keep the
same ``--port``, since the controller listens on the next one).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import secrets
import shutil
import signal
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

from gpuhint.lab.local.process import (
    LocalProcess,
    ServiceError,
    TestCerts,
    free_port,
    kill_process,
    make_test_certs,
    stop_processes,
    wait_port,
)

__all__ = [
    "LocalKafka",
    "LocalProcess",
    "LocalRedis",
    "ServiceError",
    "TestCerts",
    "docker_available",
    "free_port",
    "kafka_service",
    "kill_process",
    "make_test_certs",
    "redis_service",
    "stop_processes",
    "wait_port",
]

REPO = Path(__file__).resolve().parents[3]
KAFKA_SCRIPTS = REPO / "scripts" / "kafka"


class LocalKafka(LocalProcess):
    """Apache Kafka 4.x, single node, KRaft (broker + controller) on loopback.

    Topics are never auto-created (``auto.create.topics.enable=false``): gpuhint creates
    its own. ``secure=True`` serves clients on SASL_SSL only (TLS with a throw-away CA,
    SCRAM-SHA-256/512 and PLAIN for the user ``gpuhint``, bootstrapped with
    ``kafka-storage format --add-scram``); the broker talks to itself on a PLAINTEXT
    loopback listener. :meth:`client_env` gives the ``GPUHINT_KAFKA_*`` settings.
    """

    name = "kafka"
    user = "gpuhint"

    def __init__(
        self,
        port: int | None = None,
        workdir: Path | None = None,
        secure: bool = False,
        mechanism: str = "SCRAM-SHA-512",
        group_initial_delay_ms: int = 0,
    ) -> None:
        super().__init__(workdir)
        # 0 (tests): a group forms as soon as its first member joins; Kafka's default,
        # 3000, waits for members that join together (production brokers keep it)
        self.group_initial_delay_ms = group_initial_delay_ms
        self.port = port or free_port()
        # a persistent data dir needs the same controller address on every start
        self.controller_port = port + 1 if port else free_port()
        self.secure = secure
        self.mechanism = mechanism
        self.internal_port = port + 2 if port else free_port()
        self.password = secrets.token_hex(12)
        self.certs: TestCerts | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def client_env(self) -> dict[str, str]:
        """``GPUHINT_KAFKA_*`` settings for a client of this broker."""
        env = {"GPUHINT_KAFKA_BOOTSTRAP": self.bootstrap}
        if self.secure:
            assert self.certs is not None
            env.update(
                GPUHINT_KAFKA_SECURITY_PROTOCOL="SASL_SSL",
                GPUHINT_KAFKA_SASL_MECHANISM=self.mechanism,
                GPUHINT_KAFKA_SASL_USERNAME=self.user,
                GPUHINT_KAFKA_SASL_PASSWORD=self.password,
                GPUHINT_KAFKA_SSL_CAFILE=str(self.certs.ca),
            )
        return env

    def _listeners(self) -> list[str]:
        c = f"CONTROLLER://127.0.0.1:{self.controller_port}"
        if not self.secure:
            return [
                f"listeners=PLAINTEXT://127.0.0.1:{self.port},{c}",
                f"advertised.listeners=PLAINTEXT://127.0.0.1:{self.port}",
                "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            ]
        assert self.certs is not None
        scram = "org.apache.kafka.common.security.scram.ScramLoginModule required;"
        plain = (
            "org.apache.kafka.common.security.plain.PlainLoginModule required "
            f'user_{self.user}="{self.password}";'
        )
        return [
            f"listeners=INTERNAL://127.0.0.1:{self.internal_port},"
            f"SASL_SSL://127.0.0.1:{self.port},{c}",
            f"advertised.listeners=INTERNAL://127.0.0.1:{self.internal_port},"
            f"SASL_SSL://127.0.0.1:{self.port}",
            "listener.security.protocol.map="
            "INTERNAL:PLAINTEXT,SASL_SSL:SASL_SSL,CONTROLLER:PLAINTEXT",
            "inter.broker.listener.name=INTERNAL",
            "sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
            f"listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config={scram}",
            f"listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config={scram}",
            f"listener.name.sasl_ssl.plain.sasl.jaas.config={plain}",
            "ssl.keystore.type=PKCS12",
            f"ssl.keystore.location={self.certs.p12}",
            f"ssl.keystore.password={self.certs.password}",
            f"ssl.key.password={self.certs.password}",
            "ssl.client.auth=none",
        ]

    def _properties(self) -> Path:
        props = self.workdir / "server.properties"
        props.write_text(
            "\n".join(
                [
                    "process.roles=broker,controller",
                    "node.id=1",
                    f"controller.quorum.voters=1@127.0.0.1:{self.controller_port}",
                    *self._listeners(),
                    "controller.listener.names=CONTROLLER",
                    f"log.dirs={self.workdir / 'data'}",
                    "num.partitions=4",
                    "auto.create.topics.enable=false",
                    "offsets.topic.replication.factor=1",
                    "offsets.topic.num.partitions=4",
                    "transaction.state.log.replication.factor=1",
                    "transaction.state.log.min.isr=1",
                    "share.coordinator.state.topic.replication.factor=1",
                    "share.coordinator.state.topic.min.isr=1",
                    f"group.initial.rebalance.delay.ms={self.group_initial_delay_ms}",
                    "log.flush.interval.messages=10000000",
                ]
            )
            + "\n"
        )
        return props

    def start(self, timeout: float = 120.0) -> LocalKafka:
        java = shutil.which("java")
        if java is None:
            raise ServiceError("Java 17+ is required to run the local Kafka broker")
        fetch = subprocess.run(
            ["bash", str(KAFKA_SCRIPTS / "fetch.sh")], capture_output=True, text=True
        )
        if fetch.returncode != 0:
            raise ServiceError(f"could not fetch Kafka jars with Maven:\n{fetch.stderr[-3000:]}")
        libs = fetch.stdout.strip().splitlines()[-1]
        cp = f"{libs}/*"
        if self.secure and self.certs is None:
            self.certs = make_test_certs(self.workdir / "tls")
        props = self._properties()
        jvm = [
            java,
            "-Xms256m",
            "-Xmx768m",
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",
            f"-Dlog4j2.configurationFile={KAFKA_SCRIPTS / 'log4j2.properties'}",
            "-cp",
            cp,
        ]
        if not (self.workdir / "data" / "meta.properties").exists():  # a new data dir
            fmt = subprocess.run(
                [
                    *jvm,
                    "kafka.tools.StorageTool",
                    "format",
                    f"--cluster-id={_cluster_id()}",
                    "-c",
                    str(props),
                    *(
                        arg
                        for mech in ("SCRAM-SHA-256", "SCRAM-SHA-512")
                        for arg in (
                            "--add-scram",
                            f"{mech}=[name={self.user},password={self.password}]",
                        )
                        if self.secure
                    ),
                ],
                capture_output=True,
                text=True,
            )
            if fmt.returncode != 0:
                raise ServiceError(f"kafka-storage format failed:\n{fmt.stdout}\n{fmt.stderr}")
        self._spawn([*jvm, "kafka.Kafka", str(props)])
        try:
            wait_port(self.port, timeout, self.proc)
        except ServiceError as exc:
            tail = self.log_tail()
            self.stop()
            raise ServiceError(f"Kafka did not start: {exc}\n{tail}") from None
        return self


def _cluster_id() -> str:
    """A KRaft cluster id: 16 random bytes, URL-safe base64 without padding."""
    import base64

    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


class LocalRedis(LocalProcess):
    """Debian's redis-server on loopback; no persistence unless ``persist`` (append-only file).

    ``password`` sets the default user's password (``requirepass``); with ``user`` too,
    an ACL user of that name gets the password and the default user is disabled;
    ``tls=True`` serves TLS only (a throw-away CA: :attr:`certs`), as ``rediss://``.
    """

    name = "redis"

    def __init__(
        self,
        port: int | None = None,
        workdir: Path | None = None,
        persist: bool = False,
        password: str | None = None,
        user: str | None = None,
        tls: bool = False,
    ) -> None:
        super().__init__(workdir)
        self.port = port or free_port()
        self.persist = persist
        self.password = password
        self.user = user
        self.tls = tls
        self.certs: TestCerts | None = None

    @property
    def url(self) -> str:
        """The URL to reach it (with the secret, and the CA as ``ssl_ca_certs`` under TLS)."""
        scheme = "rediss" if self.tls else "redis"
        auth = ""
        if self.password is not None:
            auth = f"{self.user or ''}:{self.password}@"
        query = f"?ssl_ca_certs={self.certs.ca}" if self.tls and self.certs else ""
        return f"{scheme}://{auth}127.0.0.1:{self.port}/0{query}"

    def _security_args(self) -> list[str]:
        args: list[str] = []
        if self.password is not None and self.user is None:
            args += ["--requirepass", self.password]
        elif self.password is not None and self.user is not None:
            acl = self.workdir / "users.acl"
            acl.write_text(f"user {self.user} on >{self.password} ~* &* +@all\nuser default off\n")
            acl.chmod(0o600)
            args += ["--aclfile", str(acl)]
        if self.tls:
            if self.certs is None:
                self.certs = make_test_certs(self.workdir / "tls")
            args += [
                "--port", "0", "--tls-port", str(self.port),
                "--tls-cert-file", str(self.certs.cert), "--tls-key-file", str(self.certs.key),
                "--tls-ca-cert-file", str(self.certs.ca), "--tls-auth-clients", "no",
            ]  # fmt: skip
        else:
            args += ["--port", str(self.port)]
        return args

    def start(self, timeout: float = 30.0) -> LocalRedis:
        exe = shutil.which("redis-server")
        if exe is None:
            raise ServiceError(
                "redis-server not found: install it (Debian/Ubuntu: apt-get install -y "
                "redis-server) or set GPUHINT_TEST_REDIS_URL to a running Redis"
            )
        self._spawn(
            [
                exe,
                *self._security_args(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "yes" if self.persist else "no",
                "--appendfsync",
                "always" if self.persist else "everysec",
                "--dir",
                str(self.workdir),
            ]
        )
        try:
            wait_port(self.port, timeout, self.proc)
        except ServiceError as exc:
            tail = self.log_tail()
            self.stop()
            raise ServiceError(f"Redis did not start: {exc}\n{tail}") from None
        return self


def docker_available() -> bool:
    """True when a Docker daemon answers (testcontainers can then serve)."""
    try:
        import docker

        client = docker.from_env(timeout=3)
        client.ping()
        return True
    except Exception:
        return False


@contextlib.contextmanager
def kafka_service(group_initial_delay_ms: int = 0) -> Iterator[tuple[str, str]]:
    """Yield (bootstrap, how) for a Kafka broker: env var, testcontainers, or local
    (``group_initial_delay_ms``: the local broker's ``group.initial.rebalance.delay.ms``)."""
    env = os.environ.get("GPUHINT_TEST_KAFKA_BOOTSTRAP")
    if env:
        yield env, "env GPUHINT_TEST_KAFKA_BOOTSTRAP"
        return
    if docker_available():
        try:
            from testcontainers.community.kafka import KafkaContainer
        except ImportError:  # testcontainers < 4.14
            from testcontainers.kafka import KafkaContainer  # type: ignore[no-redef,unused-ignore]
        image = os.environ.get("GPUHINT_TEST_KAFKA_IMAGE", "confluentinc/cp-kafka:7.9.0")
        with KafkaContainer(image).with_kraft() as kc:
            yield kc.get_bootstrap_server(), f"testcontainers {image}"
        return
    with LocalKafka(group_initial_delay_ms=group_initial_delay_ms) as k:
        k.start()
        yield k.bootstrap, f"local Kafka broker (KRaft) at {k.bootstrap}, log {k.log_path}"


@contextlib.contextmanager
def redis_service() -> Iterator[tuple[str, str]]:
    """Yield (url, how) for a Redis server: env var, testcontainers, or local."""
    env = os.environ.get("GPUHINT_TEST_REDIS_URL")
    if env:
        yield env, "env GPUHINT_TEST_REDIS_URL"
        return
    if docker_available():
        try:
            from testcontainers.community.redis import RedisContainer
        except ImportError:  # testcontainers < 4.14
            from testcontainers.redis import RedisContainer  # type: ignore[no-redef,unused-ignore]
        with RedisContainer("redis:7") as rc:
            host = rc.get_container_host_ip()
            port = rc.get_exposed_port(6379)
            yield f"redis://{host}:{port}/0", "testcontainers redis:7"
        return
    with LocalRedis() as r:
        r.start()
        yield r.url, f"local redis-server at {r.url}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m gpuhint.lab.local.services",
        description="Run a real Kafka (KRaft) or Redis server on loopback until Ctrl-C.",
    )
    p.add_argument("service", choices=["kafka", "redis"])
    p.add_argument("--port", type=int, default=None)
    p.add_argument(
        "--secure",
        action="store_true",
        help="kafka: SASL_SSL only (SCRAM/PLAIN user gpuhint, throw-away CA); prints the settings",
    )
    p.add_argument(
        "--group-initial-delay-ms",
        type=int,
        default=0,
        metavar="MS",
        help="kafka: group.initial.rebalance.delay.ms (default 0, for fast tests; Kafka's "
        "own default is 3000: members that start together join the group's first round)",
    )
    p.add_argument("--password", help="redis: require this password (default user, or --user)")
    p.add_argument("--user", help="redis: an ACL user with --password; the default user is off")
    p.add_argument("--tls", action="store_true", help="redis: TLS only (rediss://, throw-away CA)")
    args = p.parse_args(argv)
    if args.user and not args.password:
        p.error("--user needs --password")
    svc: LocalProcess
    try:
        kdata, rdata = os.environ.get("GPUHINT_KAFKA_DATA"), os.environ.get("GPUHINT_REDIS_DATA")
        if args.service == "kafka":
            kafka = LocalKafka(
                args.port,
                Path(kdata) if kdata else None,
                secure=args.secure,
                group_initial_delay_ms=args.group_initial_delay_ms,
            )
            svc = kafka.start()
            print(f"Kafka {kafka.bootstrap} (log {kafka.log_path}); Ctrl-C stops it", flush=True)
            if args.secure:
                for k, v in kafka.client_env().items():
                    print(f"export {k}={v}", flush=True)
        else:
            redis_ = LocalRedis(
                args.port,
                Path(rdata) if rdata else None,
                persist=bool(rdata),
                password=args.password,
                user=args.user,
                tls=args.tls,
            ).start()
            svc = redis_
            shown = (
                redis_.url.replace(f":{args.password}@", ":***@") if args.password else redis_.url
            )
            print(f"Redis {shown}; Ctrl-C stops it", flush=True)
    except ServiceError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    try:
        signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
        assert svc.proc is not None
        svc.proc.wait()
    except KeyboardInterrupt:
        pass
    finally:
        svc.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())


def kafka_and_redis(
    stack: contextlib.ExitStack,
    bootstrap: str | None,
    redis_url: str | None,
    say: Callable[[str], None] = lambda _m: None,
) -> tuple[str, str]:
    """``bootstrap`` and ``redis_url``, else a private Kafka and Redis that ``stack`` keeps
    running (raises :class:`ServiceError` when one cannot start)."""
    if bootstrap is None:
        say("starting a private Kafka")
        k = stack.enter_context(LocalKafka())
        k.start()
        bootstrap = k.bootstrap
    if redis_url is None:
        r = stack.enter_context(LocalRedis())
        r.start()
        redis_url = r.url
    return bootstrap, redis_url
