#!/usr/bin/env bash
# Run redis-server (Debian: apt-get install -y redis-server) on loopback for development.
#   scripts/run-redis.sh [PORT]   (default 6379; foreground)
exec python3 -m gpuhint.testing.services redis --port "${1:-6379}"
