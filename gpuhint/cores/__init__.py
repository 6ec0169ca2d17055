"""Floor 3, the cores: where hints and advice are decided. Pure: no Kafka, Faust, Redis, NVML.

* :mod:`gpuhint.cores.qssf`: the QSSF hint engine (a job's priority, band, reasons).
* :mod:`gpuhint.cores.ces`: the CES engine (when to power nodes down or up).
* :mod:`gpuhint.cores.sink`: the sink interface the cores write to, and its in-memory twin.
* :mod:`gpuhint.cores.pipeline`: the one message path and batch routine every driver runs.
* :mod:`gpuhint.cores.job_tracker`: scheduler snapshots -> job events (shared by the feeds).
* :mod:`gpuhint.cores.freshness`: what an applier concludes about gpuhint's liveness.
"""
