"""Moved to :mod:`keygroups.punctuation` (the stage layer's home of punctuations); kept importable."""

from keygroups.punctuation import PunctuationTracker

__all__ = ["PunctuationTracker"]
