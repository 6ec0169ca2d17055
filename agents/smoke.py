"""One real NVML sample as JSON, for checking a GPU host: ``python -m agents.smoke``.

Prints the driver version, then every GpuSample and the NodeStatus of one sample, as
the agent would publish them (no Kafka). Exit 0 when NVML answered, 2 when it is
unavailable (with what to install), 1 when a GPU is unhealthy.
"""

from __future__ import annotations

import json
import socket
import sys

from agents.nvml import NvmlError, NvmlUnavailable, RealNvml
from agents.sampler import Sampler


def main() -> int:
    nv = RealNvml()
    try:
        nv.init()
    except NvmlUnavailable as exc:
        print(f"smoke: {exc}", file=sys.stderr)
        return 2
    try:
        try:
            nv.watch_xid()
        except NvmlError as exc:
            print(f"smoke: XID events unavailable: {exc}", file=sys.stderr)
        print(json.dumps({"driver": nv.driver_version(), "gpus": nv.device_count()}))
        result = Sampler(nv, cluster="smoke", node=socket.gethostname().split(".")[0]).sample()
        for s in result.gpu_samples:
            print(s.model_dump_json(exclude_none=True))
        print(result.status.model_dump_json(exclude_none=True))
        return 0 if result.status.healthy else 1
    finally:
        nv.shutdown()


if __name__ == "__main__":
    sys.exit(main())
