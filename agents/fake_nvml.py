"""A fake NVML driven by scenario data, for tests, demos and CI (which has no GPU).

A scenario is a small dict (built in below, or a JSON file of the same shape)::

    {"gpus": 8, "name": "NVIDIA A100-SXM4-80GB", "memory_total_mib": 81920,
     "idle_w": 60, "max_w": 400, "period_s": 10, "jitter": 3,
     "util": [65, 65, 0, 0, 0, 0, 0, 0],          # per GPU: a number or a list cycled
                                                   # every period_s
     "events": [{"at_s": 30, "gpu": 2, "lost": true},
                {"at_s": 0, "gpu": 1, "xid": 13},
                {"at_s": 0, "gpu": 0, "field_error": {"temperature_c": 3}},
                {"at_s": 60, "gpu": 3, "ecc": {"uncorrected": 1}}],
     "mig": {"0": [{"gi": 1, "profile": "3g.40gb", "memory_total_mib": 40192,
                    "memory_used_mib": 1200}]}}

Readings are a deterministic function of the scenario and of the seconds elapsed since
``init()`` on the injected ``clock`` (tests pass a fake clock). ``field_error`` names a
:class:`~agents.nvml.Nvml` method and the NVML return code it raises from ``at_s`` on
(until ``until_s`` if given). ``lost`` makes every call on that GPU raise
``GPU_IS_LOST`` from ``at_s`` on.

>>> nv = FakeNvml("steady", clock=lambda: 0.0)
>>> nv.init(); nv.device_count(), nv.utilization(0)[0] > 0, nv.utilization(7)
(8, True, (0, 0))
"""

from __future__ import annotations

import copy
import json
import math
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agents.nvml import (
    GPU_IS_LOST,
    MigReading,
    NvmlError,
    NvmlUnavailable,
    ProcessReading,
    XidEvent,
)

_MIB = 1 << 20

_BASE: dict[str, Any] = {
    "gpus": 8,
    "name": "NVIDIA A100-SXM4-80GB",
    "memory_total_mib": 81920,
    "idle_w": 60.0,
    "max_w": 400.0,
    "period_s": 10.0,
    "jitter": 3.0,
    "util": [0],
    "events": [],
    "mig": {},
}

SCENARIOS: dict[str, dict[str, Any]] = {
    "steady": {
        "description": "8 GPUs, 4 training jobs at a steady ~65%, 4 idle",
        "util": [65, 65, 65, 65, 0, 0, 0, 0],
    },
    "busy": {
        "description": "8 GPUs all at 90-100%, power-capped now and then",
        "util": [[92, 98, 100, 95]] * 8,
    },
    "idle": {
        "description": "8 idle GPUs (a node CES could power down)",
        "util": [0],
    },
    "gpu-lost": {
        "description": "steady, but GPU 2 fell off the bus (XID 79) from the start",
        "util": [65, 65, 65, 65, 0, 0, 0, 0],
        "events": [{"at_s": 0, "gpu": 2, "xid": 79}, {"at_s": 0, "gpu": 2, "lost": True}],
    },
    "xid": {
        "description": "steady; XID 13 on GPU 1 at once, XID 48 + an uncorrected ECC error on "
        "GPU 3 after 30 s",
        "util": [65, 65, 65, 65, 0, 0, 0, 0],
        "events": [
            {"at_s": 0, "gpu": 1, "xid": 13},
            {"at_s": 30, "gpu": 3, "xid": 48},
            {"at_s": 30, "gpu": 3, "ecc": {"uncorrected": 1}},
        ],
    },
    "field-errors": {
        "description": "steady; temperature not supported on GPU 0, power not permitted on GPU 1",
        "util": [65, 65, 65, 65, 0, 0, 0, 0],
        "events": [
            {"at_s": 0, "gpu": 0, "field_error": {"temperature_c": 3}},
            {"at_s": 0, "gpu": 1, "field_error": {"power_mw": 4}},
        ],
    },
    "mig": {
        "description": "2 GPUs; GPU 0 in MIG mode with 3 instances",
        "gpus": 2,
        "util": [40, 0],
        "mig": {
            "0": [
                {"gi": 1, "profile": "3g.40gb", "memory_total_mib": 40192, "memory_used_mib": 9000},
                {"gi": 2, "profile": "2g.20gb", "memory_total_mib": 19968, "memory_used_mib": 0},
                {"gi": 5, "profile": "1g.10gb", "memory_total_mib": 9856, "memory_used_mib": 500},
            ]
        },
    },
}


def load_scenario(name_or_path: str | Path) -> dict[str, Any]:
    """A built-in scenario by name, or a JSON file; raise ``ValueError`` with the choices."""
    key = str(name_or_path)
    if key in SCENARIOS:
        spec = copy.deepcopy(SCENARIOS[key])
    else:
        path = Path(key)
        if not path.is_file():
            raise ValueError(
                f"unknown scenario {key!r} (built in: {', '.join(SCENARIOS)}; or a JSON file)"
            )
        try:
            spec = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise ValueError(f"scenario {path}: {exc}") from None
        if not isinstance(spec, dict):
            raise ValueError(f"scenario {path}: expected a JSON object")
    merged = {**copy.deepcopy(_BASE), **spec}
    problem = _problem(merged)
    if problem:
        raise ValueError(f"scenario {key}: {problem}")
    return merged


def _num(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def _int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _problem(spec: dict[str, Any]) -> str | None:
    """What is wrong with a scenario (its values are read at every sample), else None."""
    if not _int(spec["gpus"]) or spec["gpus"] < 0:
        return "'gpus' must be a non-negative integer"
    for k in ("memory_total_mib", "idle_w", "max_w", "period_s", "jitter"):
        if not _num(spec[k]):
            return f"{k!r} must be a number"
    util = spec["util"]
    if not isinstance(util, list) or not util:
        return "'util' must be a non-empty list (per GPU: a number or a list of numbers)"
    for u in util:
        if not (_num(u) or (isinstance(u, list) and u and all(_num(x) for x in u))):
            return "'util' entries must be numbers or non-empty lists of numbers"
    if not isinstance(spec["events"], list):
        return "'events' must be a list"
    for n, e in enumerate(spec["events"]):
        if not _event_ok(e):
            return (
                f"events[{n}] must be an object with a numeric at_s/until_s, an integer gpu "
                "and xid, lost, field_error {method: code} or ecc {corrected|uncorrected: n}"
            )
    mig = spec["mig"]
    if not isinstance(mig, dict) or not all(
        isinstance(v, list) and all(isinstance(m, dict) and _int(m.get("gi")) for m in v)
        for v in mig.values()
    ):
        return "'mig' must map a GPU index to a list of instances, each with an integer 'gi'"
    return None


def _event_ok(e: Any) -> bool:
    if not isinstance(e, dict):
        return False
    if any(k in e and not _num(e[k]) for k in ("at_s", "until_s")):
        return False
    if ("gpu" in e and not (e["gpu"] is None or _int(e["gpu"]))) or (
        "xid" in e and not _int(e["xid"])
    ):
        return False
    return all(
        k not in e or (isinstance(e[k], dict) and all(_int(v) for v in e[k].values()))
        for k in ("field_error", "ecc")
    )


class FakeNvml:
    """:class:`~agents.nvml.Nvml` over a scenario; see the module docstring."""

    def __init__(
        self,
        scenario: str | Path | dict[str, Any] = "steady",
        *,
        clock: Callable[[], float] = time.time,
        seed: int = 0,
        unavailable: bool = False,
    ) -> None:
        self.spec = (
            load_scenario(scenario)
            if not isinstance(scenario, dict)
            else {
                **copy.deepcopy(_BASE),
                **scenario,
            }
        )
        self._clock = clock
        self._seed = seed
        self._unavailable = unavailable
        self._t0: float | None = None
        self._xid_sent: set[int] = set()
        self._watching = False
        self._energy: dict[int, tuple[float, float]] = {}  # index -> (last t, mJ)
        self.calls = 0

    # --- lifecycle -------------------------------------------------------
    def init(self) -> None:
        if self._unavailable:
            raise NvmlUnavailable("fake NVML told to be unavailable")
        self._t0 = self._clock()

    def shutdown(self) -> None:
        self._t0 = None

    def _elapsed(self) -> float:
        if self._t0 is None:
            raise NvmlError(1, "NVML not initialised")
        return self._clock() - self._t0

    def _active(self, kind: str, index: int) -> list[dict[str, Any]]:
        t = self._elapsed()
        return [
            e
            for e in self.spec["events"]
            if kind in e
            and e.get("gpu") == index
            and e.get("at_s", 0) <= t
            and ("until_s" not in e or t < e["until_s"])
        ]

    def _check(self, index: int, field: str) -> None:
        self.calls += 1
        if index < 0 or index >= self.spec["gpus"]:
            raise NvmlError(2, "Invalid Argument")
        if self._active("lost", index):
            raise NvmlError(GPU_IS_LOST)
        for e in self._active("field_error", index):
            code = e["field_error"].get(field)
            if code is not None:
                raise NvmlError(int(code))

    def _util(self, index: int) -> float:
        utils = self.spec["util"]
        u = utils[index] if index < len(utils) else utils[-1]
        period = float(self.spec["period_s"])
        step = int(self._elapsed() // period) if period > 0 else 0
        if isinstance(u, list):
            u = u[step % len(u)]
        u = float(u)
        if u <= 0:
            return 0.0
        rng = random.Random(hash((self._seed, index, step)))
        j = float(self.spec["jitter"])
        return max(1.0, min(100.0, u + rng.uniform(-j, j)))

    def _power_w(self, index: int) -> float:
        s = self.spec
        return (
            float(s["idle_w"]) + (float(s["max_w"]) - float(s["idle_w"])) * self._util(index) / 100
        )

    # --- readings --------------------------------------------------------
    def driver_version(self) -> str:
        return "fake-550.0"

    def device_count(self) -> int:
        self._elapsed()
        return int(self.spec["gpus"])

    def uuid(self, index: int) -> str:
        self._check(index, "uuid")
        return f"GPU-fake0000-0000-0000-0000-{index:012d}"

    def utilization(self, index: int) -> tuple[int, int]:
        self._check(index, "utilization")
        u = self._util(index)
        return round(u), round(u * 0.4)

    def memory(self, index: int) -> tuple[int, int]:
        self._check(index, "memory")
        total = int(self.spec["memory_total_mib"]) * _MIB
        u = self._util(index)
        used = int(total * (0.6 if u > 0 else 0.0)) + 512 * _MIB
        return min(used, total), total

    def power_mw(self, index: int) -> int:
        self._check(index, "power_mw")
        return round(self._power_w(index) * 1000)

    def energy_mj(self, index: int) -> int:
        self._check(index, "energy_mj")
        now = self._clock()
        last_t, mj = self._energy.get(index, (now, 1.0e9))
        mj += self._power_w(index) * max(0.0, now - last_t) * 1000
        self._energy[index] = (now, mj)
        return int(mj)

    def temperature_c(self, index: int) -> int:
        self._check(index, "temperature_c")
        return round(32 + 0.45 * self._util(index))

    def sm_clock_mhz(self, index: int) -> int:
        self._check(index, "sm_clock_mhz")
        return 1410 if self._util(index) > 0 else 210

    def throttle_reasons(self, index: int) -> int:
        self._check(index, "throttle_reasons")
        u = self._util(index)
        if u <= 0:
            return 0x1  # GpuIdle
        return 0x4 if u >= 97 else 0x0  # SwPowerCap

    def ecc_errors(self, index: int, uncorrected: bool) -> int:
        self._check(index, "ecc_errors")
        key = "uncorrected" if uncorrected else "corrected"
        return sum(int(e["ecc"].get(key, 0)) for e in self._active("ecc", index))

    def processes(self, index: int) -> list[ProcessReading]:
        self._check(index, "processes")
        if self._util(index) <= 0:
            return []
        used, _total = self.memory(index)
        return [ProcessReading(10_000 + index, used - 512 * _MIB)]

    def mig_instances(self, index: int) -> list[MigReading]:
        self._check(index, "mig_instances")
        out = []
        for m in self.spec["mig"].get(str(index), []):
            total = m.get("memory_total_mib")
            used = m.get("memory_used_mib")
            out.append(
                MigReading(
                    int(m["gi"]),
                    m.get("profile"),
                    None if total is None else int(total) * _MIB,
                    None if used is None else int(used) * _MIB,
                )
            )
        return out

    def watch_xid(self) -> None:
        self._elapsed()
        self._watching = True

    def poll_xid(self) -> list[XidEvent]:
        if not self._watching:
            return []
        t = self._elapsed()
        out = []
        for n, e in enumerate(self.spec["events"]):
            if "xid" in e and e.get("at_s", 0) <= t and n not in self._xid_sent:
                self._xid_sent.add(n)
                out.append(XidEvent(e.get("gpu"), int(e["xid"])))
        return out
