#!/usr/bin/env bash
# Run a single-node Apache Kafka broker in KRaft mode on loopback, for development and tests.
#   scripts/kafka/run-kafka.sh [PORT]      (default 9092; foreground; Ctrl-C stops it)
# The data directory is temporary unless GPUHINT_KAFKA_DATA names one to keep (then keep
# the same PORT too: the KRaft controller listens on PORT+1).
exec python3 -m gpuhint.lab.local.services kafka --port "${1:-9092}"
