"""Android `uiautomator dump` XML: one screen's view hierarchy.

`<hierarchy rotation="0"><node index text resource-id class package content-desc checkable
checked clickable enabled focusable focused scrollable long-clickable password selected
bounds="[x1,y1][x2,y2]">...</node></hierarchy>`; Appium's page source is the same tree with
elements named after the view class instead of `node`, and is read the same way.

A dump is an observation, not a trajectory: nothing acted on the screen. Decision: it becomes a
trajectory with zero turns whose `initial_state` is the hierarchy, rendered exactly as DroidBot
states are (`collectors.android_views.render_tree`), so Android screens look the same whatever
recorded them. No turn is invented: a turn with no action would teach a world model nothing and
would be counted as an (action, observation) pair everywhere else. The clean stage's
fewer-than-2-turns filter keeps these out of training shards; they remain in the corpus as screen
states (e.g. for initial states, evaluation or action-space mining).

`uiautomator dump --windows` (newer Android) writes every window instead:
`<displays><display id><window index title type active focused ...><hierarchy rotation>
<node .../></hierarchy></window>...</display></displays>`; each window is rendered under a
`window <index> "<title>" <type>` line, in document order, and the windows' attributes go to metadata.

`adb exec-out uiautomator dump /dev/tty` appends `UI hierchary dumped to: /dev/tty` after the
XML; text after the document is kept in metadata. Several dumps concatenated in one file are
split into one record per `<hierarchy>` (locator `hierarchy:N`). DTDs and entity declarations
are refused (no `defusedxml` in the stack): a dump never has them, and they are how XML bombs work.
"""

from __future__ import annotations

import io
import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from typing import IO

from collectors.android_views import View, count_views, parse_bounds_str, render_tree
from collectors.base import ImportContext, Importer
from schemas.records import RecordError, Trajectory, dumps

# XML declaration, comments and a DOCTYPE may precede the root; the DOCTYPE is admitted here only
# so that convert can refuse it by name instead of the file becoming an unknown format.
_SNIFF = re.compile(
    rb"^\s*(?:<\?xml[^>]*\?>\s*)?(?:<!--.*?-->\s*|<!DOCTYPE[^\[>]*(?:\[.*?\])?\s*>\s*)*<(?:hierarchy|displays)(?:\s[^>]*)?/?>",
    re.S,
)
_DOC = re.compile(rb"(?:<\?xml[^>]*\?>\s*)?<(hierarchy|displays)\b(?:[^>]*/>|.*?</\1\s*>)", re.S)
_WINDOW_TAGS = {"display", "window", "hierarchy"}  # the containers of a `--windows` dump
_UNSAFE = re.compile(rb"<!(?:DOCTYPE|ENTITY)", re.I)

_FLAGS = {
    "clickable": "clickable",
    "long-clickable": "long-clickable",
    "checkable": "checkable",
    "checked": "checked",
    "scrollable": "scrollable",
    "focusable": "focusable",
    "focused": "focused",
    "selected": "selected",
    "password": "password",
}


def _view(el: ET.Element) -> View:
    a = el.attrib
    flags = {name for key, name in _FLAGS.items() if a.get(key) == "true"}
    if a.get("enabled") == "false":
        flags.add("disabled")
    if a.get("visible-to-user") == "false" or a.get("displayed") == "false":
        flags.add("invisible")
    cls = a.get("class") or (el.tag if el.tag != "node" else None)
    return View(
        cls=cls or None,
        resource_id=a.get("resource-id") or None,
        text=a.get("text") or None,
        content_desc=a.get("content-desc") or None,
        hint=a.get("hint") or None,
        bounds=parse_bounds_str(a.get("bounds")),
        flags=frozenset(flags),
    )


def _window_line(a: dict) -> str:
    flags = "".join(f" {f}" for f in ("active", "focused") if a.get(f) == "true")
    return f'window {a.get("index", "?")} "{a.get("title") or ""}" {a.get("type") or ""}{flags}'.rstrip()


@dataclass
class Hierarchy:
    """One parsed dump: the document element's attributes, its views (a plain dump), or its windows
    (`--windows`: each window's attributes and views), and the packages the views name."""

    attrs: dict[str, str]
    roots: list[View]
    windows: list[dict] | None
    packages: set[str]

    def render(self) -> str:
        """The screen as text (`render_tree`; a `--windows` dump window by window)."""
        if self.windows is None:
            return render_tree(self.roots)
        return "\n".join(_window_line(w["attrs"]) + ("\n" + render_tree(w["roots"]) if w["roots"] else "")
                         for w in self.windows)


def parse_hierarchy(xml: bytes) -> Hierarchy:
    """A uiautomator dump's views (shared by this importer and the live Android collector); a
    RecordError for what is not one (bad XML, another root element, a DTD)."""
    if _UNSAFE.search(xml):
        raise RecordError(
            "unsafe_xml", "DOCTYPE or ENTITY declaration (refused: a uiautomator dump has none)"
        )
    root_attrs: dict[str, str] | None = None
    roots: list[View] = []
    stack: list[View] = []
    packages: set[str] = set()
    windows: list[dict] | None = None  # a `--windows` dump: each window's attributes and views
    display = None
    try:
        for event, el in ET.iterparse(io.BytesIO(xml), events=("start", "end")):
            if root_attrs is None:  # the first start event: the document element
                if el.tag not in ("hierarchy", "displays"):
                    raise RecordError("malformed_record", f"root element is <{el.tag}>, not <hierarchy>")
                root_attrs = dict(el.attrib)
                windows = [] if el.tag == "displays" else None
                continue
            if windows is not None and not stack and el.tag in _WINDOW_TAGS:
                if event == "start" and el.tag == "display":
                    display = el.get("id")
                elif event == "start" and el.tag == "window":
                    windows.append({"attrs": {"display": display, **el.attrib}, "roots": []})
                    roots = windows[-1]["roots"]
                elif event == "start" and windows:
                    windows[-1]["attrs"]["rotation"] = el.get("rotation")
                continue
            if event == "start":
                v = _view(el)
                if el.get("package"):
                    packages.add(el.get("package", ""))
                (stack[-1].children if stack else roots).append(v)
                stack.append(v)
            elif stack:  # the end of a view (the hierarchy's own end has an empty stack)
                stack.pop()
                el.clear()
    except ET.ParseError as e:
        line, col = e.position
        raise RecordError("invalid_xml", f"XML error at line {line} column {col}: {e}") from None
    return Hierarchy(root_attrs or {}, roots if windows is None else [], windows, packages)


def find_dump(data: bytes) -> bytes | None:
    """The first dump document in `data` (what `adb exec-out uiautomator dump /dev/tty` prints has a
    line after it), or None."""
    m = _DOC.search(data)
    return m.group(0) if m else None


class UiAutomatorImporter(Importer):
    name = "uiautomator"
    container = "text"

    def sniff(self, head: bytes) -> bool:
        m = _SNIFF.match(head)
        if not m:
            return False
        rest = head[m.end() : m.end() + 4096]
        return (
            m.group(0).endswith(b"/>")
            or rest.lstrip().startswith((b"<node", b"</hierarchy", b"<display"))
            or b"bounds=" in rest
        )

    def split(self, stream: IO[bytes], ctx: ImportContext):
        limit = ctx.limits.max_record_bytes
        data = stream.read(limit + 1)
        if len(data) > limit:
            raise RecordError("record_too_large", f"more than {limit} bytes")
        if _UNSAFE.search(data):
            raise RecordError(
                "unsafe_xml", "DOCTYPE or ENTITY declaration (refused: a uiautomator dump has none)"
            )
        docs = list(_DOC.finditer(data))
        if not docs:
            yield "$", (data, b"")  # let convert report what is wrong with it
            return
        for k, m in enumerate(docs):
            end = docs[k + 1].start() if k + 1 < len(docs) else len(data)
            loc = "$" if len(docs) == 1 else f"hierarchy:{k + 1}"
            yield loc, (m.group(0), data[m.end() : end])

    def convert(self, record: tuple[bytes, bytes], locator: str, ctx: ImportContext) -> Trajectory:
        xml, trailing = record
        h = parse_hierarchy(xml)
        root_attrs, roots, windows, packages = h.attrs, h.roots, h.windows, h.packages
        rotation = root_attrs.get("rotation") if windows is None else next(
            (w["attrs"]["rotation"] for w in windows if w["attrs"].get("rotation")), None)
        tail = trailing.decode("utf-8", errors="replace").strip()
        meta = {
            "rotation": int(rotation) if rotation and rotation.lstrip("-").isdigit() else None,
            "hierarchy_attributes": root_attrs or None,
            "packages": sorted(packages) or None,
            "num_views": count_views(roots) if windows is None else sum(count_views(w["roots"]) for w in windows),
            "windows": [w["attrs"] for w in windows] if windows is not None else None,
            "trailing_text": tail or None,
        }
        state = h.render()
        return Trajectory(
            domain="android",  # the environment the format records: `--domain` does not change it
            source_format=self.name,
            native_id=None,
            record_digest=ctx.record_digest(locator),
            turns=[],
            initial_state=state,
            agent=None,
            metadata=dumps({k: v for k, v in meta.items() if v is not None}),
            locator=locator,
        )
