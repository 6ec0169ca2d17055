"""The GPU node agent: NVML readings and scheduler snapshots published to Kafka."""
