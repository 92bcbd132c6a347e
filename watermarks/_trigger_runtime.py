"""Runtime of trigger trees: the state machines the driver runs per window.

``build(trigger)`` compiles an immutable trigger spec into a tree of nodes plus a *slot layout*:
each node owns a few positions in a flat per-window list (its ``done`` bit and its own state).
The list is the trigger's entire per-window state, so it merges slot by slot when windows merge
and serialises as a short list. Every slot declares its merge:

* ``done`` bits: a merged window has it only if every merged window had it, and a sequence's
  step takes the least: a merged window is as far along as its least advanced part (the new
  element's own window is fresh, so a session that grows restarts its sequences, as in Beam);
* AfterWatermark's on-time bit survives only if the watermark is past the end of the *merged*
  window (phase by watermark, as Beam): a session that grows past the watermark fires on time
  again, one that stays behind it remains in its late phase;
* counts add; processing-time deadlines take the earliest.

Merge functions receive the merged values and the context (``ctx.end`` is the merged window's
end).

Node protocol (``s`` is the window's slot list, ``ctx`` has ``watermark``, ``now``, ``end``):
``on_element(s, ctx)``, ``should_fire(s, ctx)``, ``fire(s, ctx) -> finished``, ``reset(s)``, and
``waiting(s, ctx)``: what the node waits for, as text (reads the slots only; a stopped query's
state shown to people).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dataflow_kafka.watermarks import triggers as T
from dataflow_kafka.errors import ArgumentTypeError

__all__ = ["build", "Layout", "late_phase_slot"]


def _all(values: list, ctx: Any) -> bool:
    return all(values)


def _sum(values: list, ctx: Any) -> int:
    return sum(values)


def _min(values: list, ctx: Any) -> Any:
    return min(values)


def _min_present(values: list, ctx: Any) -> Any:
    present = [v for v in values if v is not None]
    return min(present) if present else None


def _any_if_past_end(values: list, ctx: Any) -> bool:
    return any(values) and ctx.watermark >= ctx.end


def _with_fresh(i: int, merge: Callable[[list, Any], Any], default: Any) -> str:
    """Slot ``i``'s ``merge((s[i], default), ctx)`` as a Python expression of ``s`` and ``ctx``: what
    the slot becomes when its window merges with a new element's fresh window. The slot kinds
    above reduce to one step (a done bit clears, a count or deadline stays, a sequence restarts,
    the on-time bit needs the watermark past the merged end); any other merge is called
    (``merge_i`` and ``default_i`` in the expression's namespace)."""
    if merge is _all and default is False:
        return "False"
    if merge is _sum and type(default) is int and default == 0:
        return f"0 + s[{i}] + 0"
    if merge is _min_present and default is None:
        return f"s[{i}]"
    if merge is _min and type(default) is int and default == 0:
        return f"min(s[{i}], 0)"
    if merge is _any_if_past_end and default is False:
        return f"(bool(s[{i}]) and ctx.watermark >= ctx.end)"
    return f"merge_{i}((s[{i}], default_{i}), ctx)"


class Layout:
    """Slot defaults and merge functions, filled while building the tree."""

    def __init__(self) -> None:
        self.defaults: list[Any] = []
        self.merges: list[Callable[[list, Any], Any]] = []
        self._merge_fresh: Callable[[list, Any], list] | None = None

    def slot(self, default: Any, merge: Callable[[list, Any], Any]) -> int:
        self.defaults.append(default)
        self.merges.append(merge)
        self._merge_fresh = None
        return len(self.defaults) - 1

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_merge_fresh": None}    # compiled again where it is unpickled

    def fresh(self) -> list:
        return list(self.defaults)

    def merge(self, states: list[list], ctx: Any) -> list:
        return [m(values, ctx) for m, values in zip(self.merges, zip(*states))]

    def merge_fresh(self, state: list, ctx: Any) -> list:
        """``merge([state, fresh()], ctx)`` in one list display compiled for this layout (a
        session taking an element merges with the element's window once per element)."""
        if self._merge_fresh is None:
            names = {}
            for i, (m, d) in enumerate(zip(self.merges, self.defaults)):
                names[f"merge_{i}"], names[f"default_{i}"] = m, d
            slots = ", ".join(_with_fresh(i, m, d) for i, (m, d) in enumerate(zip(self.merges, self.defaults)))
            self._merge_fresh = eval(f"lambda s, ctx: [{slots}]", names)  # noqa: S307 - our own expressions
        return self._merge_fresh(state, ctx)


class _Node:
    __slots__ = ("done", "children")

    def __init__(self, layout: Layout, children: tuple = ()) -> None:
        self.done = layout.slot(False, _all)
        self.children = children

    def on_element(self, s: list, ctx: Any) -> None:
        for c in self.children:
            if not s[c.done]:
                c.on_element(s, ctx)

    def on_elements(self, s: list, ctx: Any, n: int) -> None:
        """``n`` calls of :meth:`on_element` (nodes whose ``n`` calls are one step say so)."""
        for _ in range(n):
            self.on_element(s, ctx)

    def should_fire(self, s: list, ctx: Any) -> bool:
        raise NotImplementedError

    def fire(self, s: list, ctx: Any) -> bool:
        finished = self._on_fire(s, ctx)
        if finished:
            s[self.done] = True
        return finished

    def _on_fire(self, s: list, ctx: Any) -> bool:
        raise NotImplementedError

    def reset(self, s: list) -> None:
        s[self.done] = False
        for c in self.children:
            c.reset(s)

    def waiting(self, s: list, ctx: Any) -> str:
        """What the node waits for before it fires next, for people (reads the slots only)."""
        return "finished" if s[self.done] else self._waiting(s, ctx)

    def _waiting(self, s: list, ctx: Any) -> str:
        raise NotImplementedError


class _Count(_Node):
    __slots__ = ("n", "count")

    def __init__(self, layout: Layout, n: int) -> None:
        super().__init__(layout)
        self.n = n
        self.count = layout.slot(0, _sum)

    def on_element(self, s: list, ctx: Any) -> None:
        s[self.count] += 1

    def on_elements(self, s: list, ctx: Any, n: int) -> None:
        s[self.count] += n

    def should_fire(self, s: list, ctx: Any) -> bool:
        return s[self.count] >= self.n

    def _on_fire(self, s: list, ctx: Any) -> bool:
        return True

    def reset(self, s: list) -> None:
        s[self.done] = False
        s[self.count] = 0

    def _waiting(self, s: list, ctx: Any) -> str:
        return f"{max(self.n - s[self.count], 0)} more element(s) (AfterCount({self.n}))"


class _ProcessingTime(_Node):
    __slots__ = ("delay", "align", "deadline")

    def __init__(self, layout: Layout, delay: int, align: int | None) -> None:
        super().__init__(layout)
        self.delay, self.align = delay, align
        self.deadline = layout.slot(None, _min_present)

    def on_element(self, s: list, ctx: Any) -> None:
        if s[self.deadline] is None:
            t = ctx.now + self.delay
            if self.align is not None:
                t = (t // self.align + 1) * self.align
            s[self.deadline] = t

    def should_fire(self, s: list, ctx: Any) -> bool:
        d = s[self.deadline]
        return d is not None and ctx.now >= d

    def _on_fire(self, s: list, ctx: Any) -> bool:
        return True

    def reset(self, s: list) -> None:
        s[self.done] = False
        s[self.deadline] = None

    def _waiting(self, s: list, ctx: Any) -> str:
        d = s[self.deadline]
        return f"an element, then processing time +{self.delay} ms" if d is None else f"processing time {d} ms"


class _Watermark(_Node):
    """AfterWatermark: early children before the end, one on-time firing, late children after."""

    __slots__ = ("early", "late", "on_time")

    def __init__(self, layout: Layout, early: _Node | None, late: _Node | None) -> None:
        super().__init__(layout, tuple(c for c in (early, late) if c is not None))
        self.early, self.late = early, late
        self.on_time = layout.slot(False, _any_if_past_end)

    def on_element(self, s: list, ctx: Any) -> None:
        if ctx.watermark < ctx.end:
            if self.early is not None:
                self.early.on_element(s, ctx)
        elif s[self.on_time] and self.late is not None:
            self.late.on_element(s, ctx)

    def on_elements(self, s: list, ctx: Any, n: int) -> None:
        if ctx.watermark < ctx.end:
            if self.early is not None:
                self.early.on_elements(s, ctx, n)
        elif s[self.on_time] and self.late is not None:
            self.late.on_elements(s, ctx, n)

    def should_fire(self, s: list, ctx: Any) -> bool:
        if ctx.watermark < ctx.end:
            return self.early is not None and self.early.should_fire(s, ctx)
        if not s[self.on_time]:
            return True
        return self.late is not None and self.late.should_fire(s, ctx)

    def _on_fire(self, s: list, ctx: Any) -> bool:
        if ctx.watermark < ctx.end:
            self.early.fire(s, ctx)  # type: ignore[union-attr]  (repeated: never finishes)
            return False
        if not s[self.on_time]:
            s[self.on_time] = True
            for c in self.children:
                c.reset(s)
            return self.late is None
        self.late.fire(s, ctx)  # type: ignore[union-attr]
        return False

    def reset(self, s: list) -> None:
        super().reset(s)
        s[self.on_time] = False

    def _waiting(self, s: list, ctx: Any) -> str:
        if ctx.watermark < ctx.end:
            early = f"; early: {self.early.waiting(s, ctx)}" if self.early is not None else ""
            return f"watermark {ctx.end} ms (on time){early}"
        if not s[self.on_time]:
            return "on time (the next batch)"
        return f"late: {self.late.waiting(s, ctx)}" if self.late is not None else "finished"


class _Default(_Node):
    __slots__ = ()

    def on_elements(self, s: list, ctx: Any, n: int) -> None:
        pass

    def should_fire(self, s: list, ctx: Any) -> bool:
        return ctx.watermark >= ctx.end

    def _on_fire(self, s: list, ctx: Any) -> bool:
        return False

    def _waiting(self, s: list, ctx: Any) -> str:
        return f"watermark {ctx.end} ms" if ctx.watermark < ctx.end else "late data (fires on each)"


class _Repeatedly(_Node):
    __slots__ = ()

    def on_elements(self, s: list, ctx: Any, n: int) -> None:
        child = self.children[0]       # on_element changes no done bit: n calls are n of the child's
        if not s[child.done]:
            child.on_elements(s, ctx, n)

    def should_fire(self, s: list, ctx: Any) -> bool:
        return self.children[0].should_fire(s, ctx)

    def _on_fire(self, s: list, ctx: Any) -> bool:
        if self.children[0].fire(s, ctx):
            self.children[0].reset(s)
        return False

    def _waiting(self, s: list, ctx: Any) -> str:
        return self.children[0].waiting(s, ctx)


class _Each(_Node):
    __slots__ = ("step",)

    def __init__(self, layout: Layout, children: tuple) -> None:
        super().__init__(layout, children)
        self.step = layout.slot(0, _min)

    def on_element(self, s: list, ctx: Any) -> None:
        if s[self.step] < len(self.children):
            self.children[s[self.step]].on_element(s, ctx)

    def should_fire(self, s: list, ctx: Any) -> bool:
        i = s[self.step]
        return i < len(self.children) and self.children[i].should_fire(s, ctx)

    def _on_fire(self, s: list, ctx: Any) -> bool:
        if self.children[s[self.step]].fire(s, ctx):
            s[self.step] += 1
        return s[self.step] >= len(self.children)

    def reset(self, s: list) -> None:
        super().reset(s)
        s[self.step] = 0

    def _waiting(self, s: list, ctx: Any) -> str:
        i = s[self.step]
        return self.children[i].waiting(s, ctx) if i < len(self.children) else "finished"


class _Any(_Node):
    __slots__ = ()

    def should_fire(self, s: list, ctx: Any) -> bool:
        return any(not s[c.done] and c.should_fire(s, ctx) for c in self.children)

    def _on_fire(self, s: list, ctx: Any) -> bool:
        finished = False
        for c in self.children:
            if not s[c.done] and c.should_fire(s, ctx) and c.fire(s, ctx):
                finished = True
        return finished

    def _waiting(self, s: list, ctx: Any) -> str:
        return " or ".join(f"({c.waiting(s, ctx)})" for c in self.children if not s[c.done])


class _All(_Node):
    __slots__ = ()

    def should_fire(self, s: list, ctx: Any) -> bool:
        pending = [c for c in self.children if not s[c.done]]
        return bool(pending) and all(c.should_fire(s, ctx) for c in pending)

    def _on_fire(self, s: list, ctx: Any) -> bool:
        for c in self.children:
            if not s[c.done]:
                c.fire(s, ctx)
        return all(s[c.done] for c in self.children)

    def _waiting(self, s: list, ctx: Any) -> str:
        return " and ".join(f"({c.waiting(s, ctx)})" for c in self.children if not s[c.done])


class _OrFinally(_Node):
    __slots__ = ()

    def should_fire(self, s: list, ctx: Any) -> bool:
        main, until = self.children
        return (not s[main.done] and main.should_fire(s, ctx)) or until.should_fire(s, ctx)

    def _on_fire(self, s: list, ctx: Any) -> bool:
        main, until = self.children
        if until.should_fire(s, ctx):
            until.fire(s, ctx)
            return True
        return main.fire(s, ctx)

    def _waiting(self, s: list, ctx: Any) -> str:
        main, until = self.children
        return f"{main.waiting(s, ctx)}, until {until.waiting(s, ctx)}"


def late_phase_slot(root: _Node) -> int | None:
    """The slot that says a window's on-time firing is done, where ``root`` (an AfterWatermark with
    late firings) counts late elements from then on; None for any other root."""
    return root.on_time if isinstance(root, _Watermark) and root.late is not None else None


def build(trigger: T.Trigger, layout: Layout) -> _Node:
    """Compile a trigger spec into runtime nodes, allocating their slots in ``layout``."""
    if isinstance(trigger, T.AfterWatermark):
        early = build(T.Repeatedly(trigger.early), layout) if trigger.early is not None else None
        late = build(T.Repeatedly(trigger.late), layout) if trigger.late is not None else None
        return _Watermark(layout, early, late)
    if isinstance(trigger, T.AfterCount):
        return _Count(layout, trigger.count)
    if isinstance(trigger, T.AfterProcessingTime):
        return _ProcessingTime(layout, trigger.delay_ms, trigger.align_ms)
    if isinstance(trigger, T.DefaultTrigger):
        return _Default(layout)
    if isinstance(trigger, T.Repeatedly):
        return _Repeatedly(layout, (build(trigger.trigger, layout),))
    if isinstance(trigger, T.OrFinally):
        return _OrFinally(layout, (build(trigger.trigger, layout), build(trigger.until, layout)))
    kinds = {T.AfterEach: _Each, T.AfterAny: _Any, T.AfterAll: _All}
    if type(trigger) in kinds:
        return kinds[type(trigger)](layout, tuple(build(t, layout) for t in trigger.triggers))
    raise ArgumentTypeError(f"no runtime for trigger {trigger!r}")
