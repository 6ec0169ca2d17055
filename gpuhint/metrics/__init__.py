"""Prometheus metrics and health endpoints: an adapter, imported only by the CLI.

* :mod:`gpuhint.metrics.server`: ``/metrics`` and ``/healthz`` over HTTP in a thread.
* :mod:`gpuhint.metrics.worker`: the worker's collector (read at scrape time from the
  engine's, the Faust monitor's and the store's own counters) and its readiness.
* :mod:`gpuhint.metrics.state`: queue lengths and power state read from Redis.
* :mod:`gpuhint.metrics.agent`: the node agent's GPUs under DCGM exporter names.
* :mod:`gpuhint.metrics.applier`: counters the Slurm and Kueue appliers call.
* :mod:`gpuhint.metrics.reasons`: dead-letter reasons folded into a few classes.

The pure cores never import this package. Every metric is listed in docs/metrics.md.
"""
