"""Malformed and poisonous job-event messages, by class, for the fault tests and bench/chaos.py.

Each generator takes a good event (as a JSON dict) and returns bytes that
:func:`gpuhint.wire.contract.decode_job_event` must reject. :func:`hostile_messages` mixes
them reproducibly.

>>> good = {"schema_version": 1, "kind": "job", "phase": "submitted", "job_id": "1",
...         "vc": "v", "num_gpus": 1, "time": 10.0, "submit_time": 10.0}
>>> sorted({cls for cls, _ in hostile_messages(good, 200, seed=1)}) == sorted(CLASSES)
True
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from typing import Any

Gen = Callable[[dict[str, Any], random.Random], bytes]


def _j(d: dict[str, Any]) -> bytes:
    return json.dumps(d).encode()


def _with(**kw: Any) -> Gen:
    return lambda good, rng: _j({**good, **kw})


def _finished(**kw: Any) -> Gen:
    def gen(good: dict[str, Any], rng: random.Random) -> bytes:
        t = good["submit_time"] + 100.0
        base = {**good, "phase": "finished", "time": t, "duration_s": 50.0, "state": "COMPLETED"}
        return _j({**base, **kw})

    return gen


def _raw(text: str) -> Gen:
    return lambda good, rng: text.encode()


def _random_bytes(good: dict[str, Any], rng: random.Random) -> bytes:
    return bytes(rng.randrange(256) for _ in range(rng.randrange(1, 200)))


def _truncated(good: dict[str, Any], rng: random.Random) -> bytes:
    raw = _j(good)
    return raw[: rng.randrange(1, len(raw) - 1)]


def _nested(depth: int) -> Gen:
    def gen(good: dict[str, Any], rng: random.Random) -> bytes:
        return b'{"schema_version": 1, "kind": "job", "x": ' + b"[" * depth + b"]" * depth + b"}"

    return gen


def _no_field(name: str) -> Gen:
    return lambda good, rng: _j({k: v for k, v in good.items() if k != name})


CLASSES: dict[str, Gen] = {
    "random_bytes": _random_bytes,
    "truncated_json": _truncated,
    "not_utf8": lambda good, rng: _j(good)[:-1] + b', "name": "\xff\xfe"}',
    "json_array": _raw("[1, 2, 3]"),
    "json_scalar": _raw("42"),
    "schema_version_2": _with(schema_version=2),
    "schema_version_string": _with(schema_version="1"),
    "schema_version_bool": _with(schema_version=True),
    "unknown_kind": _with(kind="recipe"),
    "wrong_kind_for_topic": lambda good, rng: _j(
        {"schema_version": 1, "kind": "node_status", "node": "n1", "time": 1.0, "num_gpus": 8}
    ),
    "unknown_phase": _with(phase="exploded"),
    "extra_field": _with(priority=0.0),
    "negative_gpus": _with(num_gpus=-8),
    "gpus_1e6": _with(num_gpus=1_000_000),
    "gpus_1e30": _with(num_gpus=10**30),
    "gpus_over_cluster_max": _with(num_gpus=4096),
    "gpus_as_string": _with(num_gpus="8"),
    "gpus_as_bool": _with(num_gpus=True),
    "gpus_as_float": _with(num_gpus=8.5),
    "time_nan": lambda good, rng: _j(good).replace(
        f'"time": {json.dumps(good["time"])}'.encode(), b'"time": NaN'
    ),
    "time_infinity": lambda good, rng: _j(good).replace(
        f'"time": {json.dumps(good["time"])}'.encode(), b'"time": Infinity'
    ),
    "time_as_string": _with(time="1600000000"),
    "time_year_minus_1e18": _with(time=-3.15e25, submit_time=-3.15e25),
    "time_year_3000": _with(time=32_503_680_000.0, submit_time=32_503_680_000.0),
    "time_far_future": _with(time=4_000_000_000.0, submit_time=4_000_000_000.0),
    "submit_time_null": _with(submit_time=None),
    "submit_time_missing": _no_field("submit_time"),
    "duration_infinity": _finished(duration_s=1e400),
    "duration_1e400_literal": lambda good, rng: _finished()(good, rng).replace(
        b'"duration_s": 50.0', b'"duration_s": 1e400'
    ),
    "duration_over_a_year": _finished(duration_s=400 * 86400.0, time=4e8 + 400 * 86400.0),
    "duration_negative": _finished(duration_s=-5.0),
    "duration_on_submitted": _with(duration_s=10.0),
    "finished_before_submitted": _finished(time=1.0),
    "started_before_submit": lambda good, rng: _j(
        {**good, "phase": "started", "start_time": good["submit_time"] - 3600.0}
    ),
    "user_1mb": _with(user="u" * 1_000_000),
    "user_300_chars": _with(user="u" * 300),
    "user_as_number": _with(user=12345),
    "job_id_empty": _with(job_id=""),
    "vc_with_colon": _with(vc="a:b"),
    "nodes_2000": _with(nodes=[f"n{i}" for i in range(2000)]),
    "nodes_not_names": _with(nodes=[1, 2, 3]),
    "nested_300kb": _nested(150_000),
    "nested_deep_small": _nested(500),
    "message_1mb": _with(name="x" * 1_040_000),  # just under the broker limit (1 MiB)
    "empty_object": _raw("{}"),
    "null_literal": _raw("null"),
}
"""Every class of hostile job-event message, by name."""


def hostile_messages(
    good: dict[str, Any], n: int, seed: int = 0, classes: list[str] | None = None
) -> list[tuple[str, bytes]]:
    """``n`` hostile messages (class name, bytes), every class at least once when n allows."""
    rng = random.Random(seed)
    names = sorted(classes or CLASSES)
    out = [(name, CLASSES[name](good, rng)) for name in names[:n]]
    while len(out) < n:
        name = rng.choice(names)
        out.append((name, CLASSES[name](good, rng)))
    rng.shuffle(out)
    return out
