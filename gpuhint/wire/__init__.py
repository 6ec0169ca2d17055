"""Floor 1, the wire: event and hint schemas, Redis keys, Kafka topics, settings, log helpers.

Imports nothing of gpuhint above it and no outside system; every other floor imports it.
"""
