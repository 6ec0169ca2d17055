"""Local services the lab and the tests start: real Kafka, Redis, Slurm, Kubernetes, Prometheus.

Used by the tests, the benchmarks, ``gpuhint evaluate slurm`` and the dashboard recorder.
"""
