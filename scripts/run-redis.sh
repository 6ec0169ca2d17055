#!/usr/bin/env bash
# Run redis-server (Debian: apt-get install -y redis-server) on loopback for development.
#   scripts/run-redis.sh [PORT] [--password P [--user U]] [--tls]   (default 6379; foreground)
# --password: requirepass (or an ACL user with --user; the default user is then off);
# --tls: TLS only, with a throw-away CA (the URL printed carries ?ssl_ca_certs=...).
# Data is temporary unless GPUHINT_REDIS_DATA names a directory (then append-only file).
port=6379
if [ $# -gt 0 ] && [[ "$1" != --* ]]; then port="$1"; shift; fi
exec python3 -m gpuhint.lab.local.services redis --port "$port" "$@"
