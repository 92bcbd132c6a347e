"""Key codes of the keyed tables: every key of a key group as a small integer.

:class:`~slicer.keyed.KeyedSlicingOperator` and :class:`~slicer.keyed_sessions.KeyedSessionOperator`
keep their rows by key code (a key's position in :attr:`KeyCodes.keys`, first-seen order), share
the group's watermark, drop records later than it allows alike, and forget a key once no row
needs it (it then behaves exactly as a new key).
"""

from __future__ import annotations

from typing import Hashable, Sequence

import numpy as np

__all__ = ["KeyCodes"]


class KeyCodes:
    """``keys`` (by code), ``watermark`` and ``allowed_lateness_ms`` of a keyed table."""

    keys: list
    _codes: dict
    watermark: int | None
    allowed_lateness_ms: int

    def _reset_codes(self, keys: Sequence[Hashable] = ()) -> None:
        self.keys = list(keys)
        self._codes = {k: i for i, k in enumerate(self.keys)}

    def codes_of(self, keys: Sequence[Hashable]) -> np.ndarray:
        """Codes of ``keys``, registering new ones (in order)."""
        out = np.empty(len(keys), np.int64)
        for i, k in enumerate(keys):
            c = self._codes.get(k)
            if c is None:
                c = self._codes[k] = len(self.keys)
                self.keys.append(k)
            out[i] = c
        return out

    def _drop_late(self, codes: np.ndarray, values: np.ndarray, ts: np.ndarray):
        """``(dropped per key code, codes, values, ts)``: the records with ``ts < watermark -
        allowed_lateness_ms`` removed and counted (none before the first watermark)."""
        codes = np.asarray(codes, np.int64)
        values = np.asarray(values, np.float64)
        ts = np.asarray(ts, np.int64)
        dropped = np.zeros(len(self.keys), np.int64)
        if self.watermark is not None and ts.size:
            late = ts < self.watermark - self.allowed_lateness_ms
            if late.any():
                dropped += np.bincount(codes[late], minlength=len(self.keys))
                keep = ~late
                codes, values, ts = codes[keep], values[keep], ts[keep]
        return dropped, codes, values, ts

    def _forget_unused(self, *used_codes: np.ndarray) -> np.ndarray | None:
        """Forget the keys none of ``used_codes`` names; returns the old-to-new code map (``None``
        when every key is used and codes stay)."""
        used = np.zeros(len(self.keys), bool)
        for codes in used_codes:
            used[codes] = True
        if used.all():
            return None
        remap = np.cumsum(used) - 1
        self._reset_codes(k for k, u in zip(self.keys, used.tolist()) if u)
        return remap
