#!/usr/bin/env bash
# Run redis-server (Debian: apt-get install -y redis-server) on loopback for development.
#   scripts/run-redis.sh [PORT]   (default 6379; foreground)
# Data is temporary unless GPUHINT_REDIS_DATA names a directory (then append-only file).
exec python3 -m gpuhint.testing.services redis --port "${1:-6379}"
