"""Kafka and Faust, the one home: the worker's Faust edge and every kafka-python client."""
