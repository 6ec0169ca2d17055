"""The version of gpuhint: written into model checkpoints and shown by ``gpuhint --version``."""

VERSION = "0.1.0"
