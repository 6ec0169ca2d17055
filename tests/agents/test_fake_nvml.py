"""The fake NVML: scenarios by name or file, errors as NVML would raise them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agents.fake_nvml import SCENARIOS, FakeNvml, load_scenario
from agents.nvml import GPU_IS_LOST, NvmlError, NvmlUnavailable


def test_every_builtin_scenario_loads_and_reads() -> None:
    for name in SCENARIOS:
        nv = FakeNvml(name, clock=lambda: 0.0)
        nv.init()
        assert nv.device_count() == load_scenario(name)["gpus"]


def test_unknown_scenario_names_the_choices() -> None:
    with pytest.raises(ValueError, match="steady"):
        load_scenario("nope")


def test_scenario_from_a_json_file(tmp_path: Path) -> None:
    f = tmp_path / "s.json"
    f.write_text(json.dumps({"gpus": 2, "util": [100, 0]}))
    nv = FakeNvml(str(f), clock=lambda: 0.0)
    nv.init()
    assert nv.device_count() == 2 and nv.utilization(1) == (0, 0)
    bad = tmp_path / "bad.json"
    bad.write_text("[1]")
    with pytest.raises(ValueError, match="JSON object"):
        load_scenario(str(bad))


def test_lost_gpu_raises_gpu_is_lost() -> None:
    nv = FakeNvml("gpu-lost", clock=lambda: 0.0)
    nv.init()
    with pytest.raises(NvmlError) as exc:
        nv.memory(2)
    assert exc.value.code == GPU_IS_LOST and exc.value.lost
    assert nv.memory(1)[1] > 0


def test_unavailable_fake() -> None:
    with pytest.raises(NvmlUnavailable):
        FakeNvml(unavailable=True).init()
