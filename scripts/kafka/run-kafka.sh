#!/usr/bin/env bash
# Run a single-node Apache Kafka broker in KRaft mode on loopback, for development and tests.
#   scripts/kafka/run-kafka.sh [PORT]      (default 9092; foreground; Ctrl-C stops it)
# The data directory is temporary unless GPUHINT_KAFKA_DATA is set.
exec python3 -m gpuhint.testing.services kafka --port "${1:-9092}"
