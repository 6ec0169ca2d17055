"""Redis, the one home: the store the worker writes with, the reader schedulers use."""
