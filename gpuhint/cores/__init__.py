"""Floor 3, the cores: where hints and advice are decided. Pure: no Kafka, Faust, Redis, NVML.

* :mod:`gpuhint.cores.qssf`: the QSSF hint engine (a job's priority, band, reasons); its
  parts in ``qssf_state`` (the pickled per-VC state), ``qssf_updates`` (hint updates, the
  wait bound), ``qssf_starts`` (expected starts) and ``qssf_reemit`` (re-emission).
* :mod:`gpuhint.cores.ces`: the CES engine (when to power nodes down or up).
* :mod:`gpuhint.cores.sink`: the sink interface the cores write to, and its in-memory twin.
* :mod:`gpuhint.cores.pipeline`: the one message path and batch routine every driver runs.
* :mod:`gpuhint.cores.job_tracker`: scheduler snapshots -> job events (shared by the feeds).
* :mod:`gpuhint.cores.freshness`: what an applier concludes about gpuhint's liveness.
"""
