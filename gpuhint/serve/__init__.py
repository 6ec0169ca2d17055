"""``gpuhint serve``: one process for one cluster, no Kafka (a local durable log)."""
