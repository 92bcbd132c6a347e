"""The main job: ``python -m demo`` (or ``make demo``)."""
