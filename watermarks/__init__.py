"""Event-time progress: punctuation tracking and the Dataflow Model (windows, triggers,
accumulation modes). Pure Python, no Spark import."""

from watermarks.punctuation import PunctuationTracker

__all__ = ["PunctuationTracker"]
