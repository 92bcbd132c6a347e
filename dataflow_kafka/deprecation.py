"""Names that moved: an old import path keeps working for a while, with a ``DeprecationWarning``.

A module lists what moved from it as data, ``{old name: Moved(module, name, note)}``, and serves
the list with :func:`moved_names` as its module ``__getattr__``: ``from dataflow_kafka.windowing
import FixedWindows`` then imports ``FixedWindows`` from its one home
(``dataflow_kafka.compat.beam``) and warns, naming the new path. The target is a module name, a
string imported on first use (like the root package's lazy exports), so a module low in the
layers can point at a higher one (``compat``) without importing it.

>>> import warnings
>>> __getattr__ = moved_names("example", {"old_sqrt": Moved("math", "sqrt", "say sqrt")})
>>> with warnings.catch_warnings(record=True) as seen:
...     warnings.simplefilter("always")
...     __getattr__("old_sqrt")(4.0), str(seen[0].message)
(2.0, 'example.old_sqrt is deprecated: say sqrt; import sqrt from math')
"""

from __future__ import annotations

import importlib
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Mapping

__all__ = ["Moved", "moved_names"]


@dataclass(frozen=True)
class Moved:
    """Where a deprecated name lives now: ``module`` (dotted) and ``name`` there, and why."""

    module: str
    name: str
    note: str = ""


def moved_names(module: str, moved: Mapping[str, Moved], stacklevel: int = 2) -> Callable[[str], Any]:
    """A module ``__getattr__`` that serves the ``moved`` names of ``module`` from their new home,
    with a ``DeprecationWarning`` pointing at the caller (``stacklevel`` frames up: 3 when another
    ``__getattr__`` calls this one); any other name is an ``AttributeError``."""

    def __getattr__(name: str) -> Any:
        target = moved.get(name)
        if target is None:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        note = f"{target.note}; " if target.note else ""
        warnings.warn(f"{module}.{name} is deprecated: {note}import {target.name} from {target.module}",
                      DeprecationWarning, stacklevel=stacklevel)
        return getattr(importlib.import_module(target.module), target.name)

    return __getattr__
