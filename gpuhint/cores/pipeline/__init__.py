"""The message path and the batch routine: the worker, ``gpuhint demo`` and the tests run it.

Pure: the Faust edge (:mod:`streams`) and the in-memory log (:mod:`.inprocess`) drive it.
"""
