"""One text rendering of Android view hierarchies, shared by the DroidBot and uiautomator importers.

Both sources describe the same thing (a tree of views with class, resource id, text, content
description, bounds and state flags) in different shapes: DroidBot as a flat JSON list with
parent/children indices, `uiautomator dump` as nested XML. Rendering both through `render_tree`
makes an Android observation look the same whatever recorded it, so a world model sees one
observation language per domain.

The rendering is one line per view, in pre-order, indented two spaces per depth:

    [3] android.widget.TextView id=com.app:id/title text="Inbox" desc="Open inbox" bounds=[0,96][1440,264] clickable

`[n]` is the view's pre-order position in the tree (for DroidBot this is its `temp_id`); strings
are JSON-quoted so that a view is always exactly one line; only true flags are listed, except
`disabled` and `invisible`, which mark the unusual false case.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field

# Flag names in rendering order; the value is the flag's printed name.
FLAG_ORDER: tuple[str, ...] = (
    "clickable",
    "long-clickable",
    "checkable",
    "checked",
    "scrollable",
    "editable",
    "focusable",
    "focused",
    "selected",
    "password",
    "disabled",
    "invisible",
)

Bounds = tuple[tuple[int, int], tuple[int, int]]


@dataclass(slots=True)
class View:
    """A source-independent view: what the rendering needs and nothing else."""

    cls: str | None = None
    resource_id: str | None = None
    text: str | None = None
    content_desc: str | None = None
    hint: str | None = None
    bounds: Bounds | None = None
    flags: frozenset[str] = frozenset()
    children: list[View] = field(default_factory=list)


def _q(s: str) -> str:
    return json.dumps(s, ensure_ascii=False)


def describe(view: View) -> str:
    """The one-line description of a view, without its index (also used in action strings)."""
    parts = [view.cls or "View"]
    if view.resource_id:
        parts.append(f"id={view.resource_id}")
    if view.text:
        parts.append(f"text={_q(view.text)}")
    if view.content_desc:
        parts.append(f"desc={_q(view.content_desc)}")
    if view.hint:
        parts.append(f"hint={_q(view.hint)}")
    if view.bounds is not None:
        (x1, y1), (x2, y2) = view.bounds
        parts.append(f"bounds=[{x1},{y1}][{x2},{y2}]")
    parts.extend(f for f in FLAG_ORDER if f in view.flags)
    return " ".join(parts)


def walk(view: View) -> Iterator[tuple[int, View]]:
    """(depth, view) in pre-order; iterative (deep trees must not hit the recursion limit) and
    cycle-safe (a view already visited is not entered again)."""
    seen: set[int] = set()
    stack: list[tuple[int, View]] = [(0, view)]
    while stack:
        d, v = stack.pop()
        if id(v) in seen:
            continue
        seen.add(id(v))
        yield d, v
        stack.extend((d + 1, c) for c in reversed(v.children))


def render_tree(roots: list[View]) -> str:
    """Deterministic text of a forest of views (usually one root)."""
    lines: list[str] = []
    n = 0
    for root in roots:
        for depth, v in walk(root):
            lines.append(f"{'  ' * depth}[{n}] {describe(v)}")
            n += 1
    return "\n".join(lines)


def count_views(roots: list[View]) -> int:
    return sum(1 for r in roots for _ in walk(r))


def parse_bounds_str(s: str | None) -> Bounds | None:
    """uiautomator's `[x1,y1][x2,y2]`; None when absent or not in that shape."""
    if not s:
        return None
    try:
        a, b = s.strip().strip("[]").split("][")
        x1, y1 = (int(v) for v in a.split(","))
        x2, y2 = (int(v) for v in b.split(","))
    except ValueError:
        return None
    return (x1, y1), (x2, y2)


def parse_bounds_pairs(v: object) -> Bounds | None:
    """DroidBot's `[[x1, y1], [x2, y2]]`; None when absent or not in that shape."""
    try:
        (x1, y1), (x2, y2) = v  # type: ignore[misc]
        return (int(x1), int(y1)), (int(x2), int(y2))
    except (TypeError, ValueError):
        return None
