#!/usr/bin/env bash
# Fetch Apache Kafka (org.apache.kafka:kafka_2.13, see pom.xml) and its dependencies from
# Maven Central into $GPUHINT_KAFKA_LIBS (default: <repo>/.cache/kafka/libs). Idempotent.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
libs="${GPUHINT_KAFKA_LIBS:-$repo/.cache/kafka/libs}"
version="$(sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' "$here/pom.xml")"
if [ -f "$libs/kafka_2.13-$version.jar" ]; then
  echo "$libs"
  exit 0
fi
command -v mvn >/dev/null || { echo "fetch.sh: Maven (mvn) is required to fetch Kafka" >&2; exit 1; }
command -v java >/dev/null || { echo "fetch.sh: Java 17+ is required to run Kafka" >&2; exit 1; }
mkdir -p "$libs"
echo "fetching Apache Kafka $version from Maven Central into $libs ..." >&2
mvn -q -B -f "$here/pom.xml" dependency:copy-dependencies \
  -DoutputDirectory="$libs" -DincludeScope=runtime >&2
echo "$libs"
