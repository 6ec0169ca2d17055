"""The offline lab, above the systems: traces, evaluation, analysis, replay, local services.

Nothing below (wire, models, cores, the system homes) imports it; the CLI does.
"""
