"""Browser task specs (`sandboxes/web/*.yaml`): a site folder served at an origin, and sessions of
scripted steps that name elements as the accessibility tree shows them (`button "Add to cart"`).

Steps are checked when the spec loads, so a typo fails before chromium starts; the message names the
file, the session and the step."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from collectors import specs

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_DIR = REPO_ROOT / "sandboxes" / "web"

# step kind -> the keys it takes besides `do` (`target` or `ref` names the element)
STEP_KEYS: dict[str, set[str]] = {
    "click": {"target", "ref"},
    "fill": {"target", "ref", "value"},
    "press": {"target", "ref", "key"},
    "select": {"target", "ref", "value"},
    "check": {"target", "ref"},
    "uncheck": {"target", "ref"},
    "goto": {"url"},
}
# What the trajectory's action_space lists and an agent is offered as tools: BrowserGym's actions on refs.
_REF_PARAM = {"ref": {"type": "string", "description": "the element's ref in the tree, e.g. e12"}}


def _tool(name: str, description: str, **params: dict) -> dict:
    props = {**({} if name == "goto" else _REF_PARAM), **params}
    return {"name": name, "description": description,
            "inputSchema": {"type": "object", "properties": props, "required": list(props)}}


ACTION_SPACE = [
    _tool("click", "click(ref): click the element"),
    _tool("fill", "fill(ref, value): type value into a text field, replacing its content",
          value={"type": "string"}),
    _tool("press", "press(ref, key): press a key (Enter, Tab, ArrowDown, ...) in the element", key={"type": "string"}),
    _tool("select_option", "select_option(ref, value): choose an option of a select box by value or label",
          value={"type": "string"}),
    _tool("check", "check(ref): tick a checkbox"),
    _tool("uncheck", "uncheck(ref): clear a checkbox"),
    _tool("goto", "goto(url): load a URL (a path on the site, or a whole URL)", url={"type": "string"}),
]
TOOL_STEP = {"select_option": "select"}  # tool name -> step kind, where they differ


_TARGET = re.compile(r'^([a-z][a-z-]*)(?: ("(?:[^"\\]|\\.)*"))?$')
_REF = re.compile(r"^(?:f\d+)?e\d+$")


class SpecError(ValueError):
    """A spec that cannot be used; the message names the file, session and step."""


@dataclass(frozen=True)
class Target:
    """An element as the tree shows it: its role and, when it has one, its accessible name."""

    role: str
    name: str | None = None

    def __str__(self) -> str:
        return self.role if self.name is None else f"{self.role} {json.dumps(self.name, ensure_ascii=False)}"


@dataclass
class Step:
    do: str
    target: Target | None = None
    ref: str | None = None  # a ref written in the spec: the element need not exist (an agent's mistake)
    value: str | None = None
    key: str | None = None
    url: str | None = None


@dataclass
class Expect:
    """How the outcome is judged on the last page: its text contains `text`, its path is `path`."""

    text: str | None = None
    path: str | None = None


@dataclass
class Session:
    name: str
    task: str
    start: str
    steps: list[Step]
    expect: Expect | None = None


@dataclass
class SiteSpec:
    name: str
    path: Path
    site: Path
    origin: str
    sessions: list[Session]
    description: str = ""
    license: str | None = None
    action_timeout_s: float = 5.0
    sha256: str = ""  # of the spec and every file of the site: the environment's fingerprint
    files: dict[str, bytes] = field(default_factory=dict, repr=False)


def parse_target(text: str) -> Target:
    m = _TARGET.match(text.strip())
    if not m:
        raise ValueError(f'expected `role "name"` or `role`, got {text!r}')
    return Target(m.group(1), json.loads(m.group(2)) if m.group(2) else None)


def _keys(where: str, obj: Any, allowed: set[str], required: set[str] = frozenset()) -> dict:
    return specs.check_keys(where, obj, allowed, SpecError, required)


def _step(where: str, raw: Any) -> Step:
    do, obj = specs.step_mapping(where, raw, STEP_KEYS, SpecError)
    for k, v in obj.items():
        if not isinstance(v, str):
            raise SpecError(f"{where}: `{k}` must be text, got {type(v).__name__}")
    if do == "goto":
        if "url" not in obj:
            raise SpecError(f"{where}: goto needs `url`")
        if not obj["url"].startswith("/") and not re.match(r"^https?://", obj["url"]):
            raise SpecError(f"{where}: url must be a path on the site (/cart.html) or a whole URL, got {obj['url']!r}")
        return Step(do, url=obj["url"])
    if ("target" in obj) == ("ref" in obj):
        raise SpecError(f"{where}: {do} needs exactly one of `target` (role \"name\") and `ref`")
    for need in {"fill": "value", "select": "value", "press": "key"}.get(do, "").split():
        if need not in obj:
            raise SpecError(f"{where}: {do} needs `{need}`")
    target = None
    if "target" in obj:
        try:
            target = parse_target(obj["target"])
        except ValueError as e:
            raise SpecError(f"{where}: target: {e}") from None
    if "ref" in obj and not _REF.match(obj["ref"]):
        raise SpecError(f"{where}: ref must look like e12, got {obj['ref']!r}")
    return Step(do, target=target, ref=obj.get("ref"), value=obj.get("value"), key=obj.get("key"))


def step_of_call(name: str | None, args: dict[str, Any] | None) -> Step | str:
    """An agent's tool call as a step, or why it cannot be one (the message the agent then sees)."""
    do = TOOL_STEP.get(name or "", name or "")
    if do not in STEP_KEYS:
        return f"unknown action {name!r}; the actions are {', '.join(t['name'] for t in ACTION_SPACE)}"
    args = args if isinstance(args, dict) else {}
    need = {"fill": ("ref", "value"), "select": ("ref", "value"), "press": ("ref", "key"), "goto": ("url",)}.get(do, ("ref",))
    missing = [k for k in need if not isinstance(args.get(k), str) or not args[k]]
    if missing:
        return f"{name} needs {' and '.join(missing)} as text"
    return Step(do, ref=args.get("ref"), value=args.get("value"), key=args.get("key"), url=args.get("url"))


def load_spec(path: Path | str) -> SiteSpec:
    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as e:
        raise SpecError(f"{path}: cannot read the spec: {e}") from None
    top = _keys(str(path), raw, {"name", "description", "site", "origin", "license", "action_timeout_s", "sessions"},
                {"name", "site", "sessions"})
    site = (path.parent / str(top["site"])).resolve()
    if not site.is_dir():
        raise SpecError(f"{path}: site: {site} is not a folder")
    origin = str(top.get("origin") or f"http://{top['name']}.test").rstrip("/")
    if not re.match(r"^https?://[a-z0-9.-]+(?::\d+)?$", origin):
        raise SpecError(f"{path}: origin must be scheme://host[:port], got {origin!r}")
    if origin.endswith((":80", ":443")) and origin.startswith("http://" if origin.endswith(":80") else "https://"):
        origin = origin.rsplit(":", 1)[0]  # the scheme's own port: the browser's URLs leave it out
    timeout = specs.number(f"{path}: action_timeout_s", top.get("action_timeout_s", 5.0), SpecError)
    for key in ("name", "description", "license"):
        specs.text(f"{path}: {key}", top.get(key), SpecError)  # a list here was found only at the corpus write
    if not specs.text(f"{path}: name", top["name"], SpecError):
        raise SpecError(f"{path}: name is blank")
    if not isinstance(top["sessions"], list) or not top["sessions"]:
        raise SpecError(f"{path}: sessions must be a non-empty list")
    sessions: list[Session] = []
    for i, s in enumerate(top["sessions"]):
        where = f"{path}: sessions[{i}]"
        s = _keys(where, s, {"name", "task", "start", "steps", "expect"}, {"name", "task", "steps"})
        for key in ("name", "task"):  # left blank, they were recorded as the word "None"
            if not specs.text(f"{where}.{key}", s[key], SpecError).strip():
                raise SpecError(f"{where}: {key} is blank")
        where = f"{path}: session {s['name']}"
        if not isinstance(s["steps"], list) or not s["steps"]:
            raise SpecError(f"{where}: steps must be a non-empty list")
        steps = [_step(f"{where}: step {j}", st) for j, st in enumerate(s["steps"])]
        expect = None
        if s.get("expect") is not None:
            e = _keys(f"{where}: expect", s["expect"], {"text", "path"})
            if e.get("text") is not None and not isinstance(e["text"], str):
                raise SpecError(f"{where}: expect.text must be text, got {e['text']!r}")
            if e.get("path") is not None and not (isinstance(e["path"], str) and e["path"].startswith("/")
                                                  and "?" not in e["path"] and "#" not in e["path"]):
                raise SpecError(f"{where}: expect.path must be a path on the site, starting with / and without a query "
                                f"(the page's path is compared), got {e['path']!r}")
            expect = Expect(text=e.get("text"), path=e.get("path"))
        start = str(s.get("start") or "/index.html")
        if not start.startswith("/"):
            raise SpecError(f"{where}: start must be a path on the site, starting with / (got {start!r})")
        sessions.append(Session(str(s["name"]), str(s["task"]), start, steps, expect))
    specs.check_unique_sessions(path, sessions, SpecError)
    files = {f"/{p.relative_to(site).as_posix()}": p.read_bytes() for p in sorted(site.rglob("*")) if p.is_file()}
    h = hashlib.sha256(path.read_bytes())
    for name, data in files.items():
        h.update(b"\0" + name.encode() + b"\0" + hashlib.sha256(data).digest())
    return SiteSpec(str(top["name"]), path, site, origin, sessions, str(top.get("description") or ""),
                    top.get("license"), float(timeout), h.hexdigest(), files)


def spec_files(paths: list[Path | str]) -> list[Path]:
    """The spec files named (a folder stands for the `*.yaml` files in it)."""
    return specs.spec_files(paths, "browser site specs", SpecError)


def default_specs() -> list[Path]:
    return sorted(DEFAULT_DIR.glob("*.yaml"))
