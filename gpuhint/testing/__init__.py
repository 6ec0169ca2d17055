"""Development and test helpers: real Kafka and Redis servers on loopback."""
