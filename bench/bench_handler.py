"""The worker's per-event path in process: decode, key check, hint core, buffered writes.

What one Faust worker does with each job event minus Kafka, Faust and Redis: the bytes
of ``bench_pipeline``'s job lifecycles (submitted, started, finished; ``--vcs`` VCs)
go through :class:`gpuhint.cores.pipeline.handler.MessageHandler` over :class:`TableStates` and an
``InMemoryStore`` (flushed every 500 events, as a full batch). Also times
``decode_message`` alone, the pickle of one VC's state (what each save does under the
batch lock) and its compression (done outside the lock); ``--waiting`` leaves that many
submitted jobs waiting per VC first, as under a growing queue.
Compare builds by running this file with ``PYTHONPATH`` set to each checkout.

    python bench/bench_handler.py [--lifecycles 6000] [--vcs 16] [--waiting 0]
                                  [--model history_mix] [--json]
"""

from __future__ import annotations

import argparse
import os
import pickle
import platform
import sys
import time
from datetime import UTC, datetime
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_pipeline import lifecycle, print_result

from gpuhint.cores.pipeline.handler import Message, MessageHandler
from gpuhint.cores.pipeline.partitioning import partition_for
from gpuhint.cores.pipeline.state_table import TableStates
from gpuhint.cores.qssf import HintEngine
from gpuhint.cores.sink import InMemoryStore
from gpuhint.wire.contract import decode_job_event, encode_message
from gpuhint.wire.topics import job_key
from models.registry import make_model


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--lifecycles", type=int, default=6000)
    ap.add_argument("--vcs", type=int, default=16)
    ap.add_argument("--model", default="history_mix")
    ap.add_argument("--waiting", type=int, default=0, help="submitted jobs left per VC")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    t = time.time()
    evs = [e for i in range(args.lifecycles) for e in lifecycle(i, "thr", args.vcs, t)]
    evs += [lifecycle(i, "wait", args.vcs, t)[0] for i in range(args.waiting * args.vcs)]
    msgs: list[Message] = []
    offsets: dict[int, int] = {}
    for ev in evs:
        key = job_key(ev.cluster, ev.vc)
        part = partition_for(key, 8)
        off = offsets.get(part, 0)
        offsets[part] = off + 1
        msgs.append(Message("gpuhint.job-events", part, off, key, encode_message(ev)))

    t0 = time.perf_counter()
    for m in msgs:
        decode_job_event(m.value or b"")
    decode_per_s = len(msgs) / (time.perf_counter() - t0)

    states = TableStates({})
    store = InMemoryStore()
    handler = MessageHandler(HintEngine(partial(make_model, args.model), store, states=states))
    t0 = time.perf_counter()
    for i, m in enumerate(msgs, 1):
        handler.job_event(m)
        if i % 500 == 0:
            store.flush()
    store.flush()
    handler_per_s = len(msgs) / (time.perf_counter() - t0)

    vc_states = [states[k] for k in sorted(states)]
    t0 = time.perf_counter()
    raw = [pickle.dumps(s, protocol=pickle.HIGHEST_PROTOCOL) for s in vc_states]
    pickle_ms = (time.perf_counter() - t0) / len(vc_states) * 1e3
    t0 = time.perf_counter()
    sealed = states.seal_all([(str(i), r) for i, r in enumerate(raw)])
    seal_ms = (time.perf_counter() - t0) / len(vc_states) * 1e3
    out = {
        "command": " ".join(["python", "bench/bench_handler.py", *sys.argv[1:]]),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}",
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "load_average": list(os.getloadavg()),
        "model": args.model,
        "events": len(msgs),
        "decode_per_s": decode_per_s,
        "handler_events_per_s": handler_per_s,
        "vc_state_pickle_ms": pickle_ms,
        "vc_state_pickle_bytes": sum(map(len, raw)) / len(raw),
        "vc_state_zlib_bytes": sum(len(b) for _, b in sealed) / len(sealed),
        "vc_state_compress_ms": seal_ms,
        "waiting_per_vc": args.waiting,
    }
    print_result(out, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
