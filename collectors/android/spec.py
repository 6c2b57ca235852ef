"""Android app specs (`sandboxes/android/*.yaml`): an app (package and launch activity) and sessions of
scripted steps that name views as the screen's rendering shows them (`id=btn_preview`,
`text="OK"`, `desc="Select Image"`).

Steps are checked when the spec loads, so a typo fails before adb is called; the message names the
file, the session and the step."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from collectors import specs
from collectors.android_views import View

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_DIR = REPO_ROOT / "sandboxes" / "android"

# step kind -> the keys it takes besides `do` (`target` or `index` names the view; `nth` picks among matches)
STEP_KEYS: dict[str, set[str]] = {
    "tap": {"target", "index", "nth"},
    "long_press": {"target", "index", "nth"},
    "type": {"target", "index", "nth", "text"},
    "swipe": {"direction"},
    "back": set(),
    "home": set(),
    "enter": set(),
    "launch": set(),
}
DIRECTIONS = ("up", "down", "left", "right")
_INDEX_PARAM = {"index": {"type": "integer", "description": "the view's [index] in the screen's tree"}}


def _tool(name: str, description: str, index: bool = False, **params: dict) -> dict:
    props = {**(_INDEX_PARAM if index else {}), **params}
    return {"name": name, "description": description,
            "inputSchema": {"type": "object", "properties": props, "required": list(props)}}


# What the trajectory's action_space lists and an agent is offered as tools: AndroidWorld's actions,
# on the [index] of a view in the rendered tree instead of a screen coordinate.
ACTION_SPACE = [
    _tool("tap", "tap(index): tap the middle of the view", index=True),
    _tool("long_press", "long_press(index): press and hold the middle of the view", index=True),
    _tool("type", "type(index, text): tap a text field, then type text into it", index=True,
          text={"type": "string"}),
    _tool("swipe", "swipe(direction): swipe a third of the screen across its middle; up shows what is below", direction={
        "type": "string", "enum": list(DIRECTIONS)}),
    _tool("back", "back(): press the back key"),
    _tool("home", "home(): press the home key"),
    _tool("enter", "enter(): press the enter key"),
    _tool("launch", "launch(): start the task's app again from its launch activity"),
]

_CONSTRAINT = re.compile(r'(id|text|desc|class)=("(?:[^"\\]|\\.)*"|\S+)')


class SpecError(ValueError):
    """A spec that cannot be used; the message names the file, session and step."""


@dataclass(frozen=True)
class Target:
    """A view as the rendering shows it: every constraint must hold (`id` may leave out the package:
    `id=btn_ok` matches `com.app:id/btn_ok`)."""

    constraints: tuple[tuple[str, str], ...]

    def __str__(self) -> str:
        return " ".join(f"{k}={json.dumps(v, ensure_ascii=False) if k in ('text', 'desc') else v}"
                        for k, v in self.constraints)

    def matches(self, v: View) -> bool:
        for key, want in self.constraints:
            if key == "id":
                rid = v.resource_id or ""
                if rid != want and not rid.endswith(f":id/{want}"):
                    return False
            elif (v.text if key == "text" else v.content_desc if key == "desc" else v.cls) != want:
                return False
        return True


@dataclass
class Step:
    do: str
    target: Target | None = None
    index: int | None = None  # an index written in the spec: the view need not exist (an agent's mistake)
    nth: int = 1
    text: str | None = None
    direction: str | None = None


@dataclass
class Session:
    name: str
    task: str
    steps: list[Step]
    expect: Target | None = None  # judged on the last screen: a view that matches is there


@dataclass
class AppSpec:
    name: str
    path: Path
    package: str
    activity: str
    sessions: list[Session]
    description: str = ""
    license: str | None = None
    settle_s: float = 0.5
    sha256: str = ""  # of the spec file: with the device's build, the environment's fingerprint

    @property
    def component(self) -> str:
        """What `am start -n` takes: package/activity (an activity starting with `.` is in the package)."""
        return f"{self.package}/{self.activity}"


def parse_target(text: str) -> Target:
    text = text.strip()
    found: list[tuple[str, str]] = []
    pos = 0
    expected = f'expected one or more of id=..., text="...", desc="...", class=..., got {text!r}'
    for m in _CONSTRAINT.finditer(text):
        if text[pos:m.start()].strip():
            break
        value = m.group(2)
        try:
            found.append((m.group(1), json.loads(value) if value.startswith('"') else value))
        except ValueError:  # an opening quote with no closing one
            raise ValueError(expected) from None
        pos = m.end()
    if not found or text[pos:].strip():
        raise ValueError(expected)
    return Target(tuple(found))


def _keys(where: str, obj: Any, allowed: set[str], required: set[str] = frozenset()) -> dict:
    return specs.check_keys(where, obj, allowed, SpecError, required)


def _step(where: str, raw: Any) -> Step:
    do, obj = specs.step_mapping(where, raw, STEP_KEYS, SpecError)
    for k in ("index", "nth"):
        if k in obj and (type(obj[k]) is not int or obj[k] < (0 if k == "index" else 1)):
            raise SpecError(f"{where}: `{k}` must be a whole number{' from 1' if k == 'nth' else ''}, got {obj[k]!r}")
    for k in ("target", "text", "direction"):
        if k in obj and not isinstance(obj[k], str):
            raise SpecError(f"{where}: `{k}` must be text, got {type(obj[k]).__name__}")
    if do == "swipe":
        if obj.get("direction") not in DIRECTIONS:
            raise SpecError(f"{where}: swipe needs `direction`, one of {', '.join(DIRECTIONS)}")
        return Step(do, direction=obj["direction"])
    if not STEP_KEYS[do]:
        return Step(do)
    if ("target" in obj) == ("index" in obj):
        raise SpecError(f"{where}: {do} needs exactly one of `target` (id=... text=\"...\") and `index`")
    if "nth" in obj and "target" not in obj:
        raise SpecError(f"{where}: `nth` picks among the views a `target` matches")
    if do == "type" and "text" not in obj:
        raise SpecError(f"{where}: type needs `text`")
    target = None
    if "target" in obj:
        try:
            target = parse_target(obj["target"])
        except ValueError as e:
            raise SpecError(f"{where}: target: {e}") from None
    return Step(do, target=target, index=obj.get("index"), nth=obj.get("nth", 1), text=obj.get("text"))


def step_of_call(name: str | None, args: dict[str, Any] | None) -> Step | str:
    """An agent's tool call as a step, or why it cannot be one (the message the agent then sees)."""
    if name not in STEP_KEYS:
        return f"unknown action {name!r}; the actions are {', '.join(t['name'] for t in ACTION_SPACE)}"
    args = args if isinstance(args, dict) else {}
    if "index" in STEP_KEYS[name]:
        index = args.get("index")
        if isinstance(index, str) and index.strip().lstrip("[").rstrip("]").isdigit():
            index = int(index.strip().strip("[]"))  # "12" or "[12]": what the tree shows
        if type(index) is not int:
            return f"{name} needs index as a whole number (a view's [index] in the tree)"
        if name == "type" and not isinstance(args.get("text"), str):
            return "type needs text"
        return Step(name, index=index, text=args.get("text"))
    if name == "swipe":
        if args.get("direction") not in DIRECTIONS:
            return f"swipe needs direction, one of {', '.join(DIRECTIONS)}"
        return Step(name, direction=args["direction"])
    return Step(name)


def load_spec(path: Path | str) -> AppSpec:
    path = Path(path)
    try:
        data = path.read_bytes()
        raw = yaml.safe_load(data)
    except (OSError, yaml.YAMLError) as e:
        raise SpecError(f"{path}: cannot read the spec: {e}") from None
    top = _keys(str(path), raw, {"name", "description", "package", "activity", "license", "settle_s", "sessions"},
                {"name", "package", "activity", "sessions"})
    package = top["package"]
    if not isinstance(package, str) or not re.match(r"^[A-Za-z][\w]*(\.[A-Za-z][\w]*)+$", package):
        raise SpecError(f"{path}: package must be an Android package name (com.example.app), got {package!r}")
    activity = top["activity"]  # `adb shell cmd package resolve-activity --brief PACKAGE` names the launcher's
    if not isinstance(activity, str) or not re.match(r"^[\w.$]+$", activity):
        raise SpecError(f"{path}: activity must be a class name (.MainActivity or com.example.app.MainActivity), "
                        f"got {activity!r}")
    settle = top.get("settle_s", 0.5)
    if not isinstance(settle, int | float) or isinstance(settle, bool) or settle < 0:
        raise SpecError(f"{path}: settle_s must be a number of seconds (0 or more), got {settle!r}")
    if not isinstance(top["sessions"], list) or not top["sessions"]:
        raise SpecError(f"{path}: sessions must be a non-empty list")
    sessions: list[Session] = []
    for i, s in enumerate(top["sessions"]):
        s = _keys(f"{path}: sessions[{i}]", s, {"name", "task", "steps", "expect"}, {"name", "task", "steps"})
        where = f"{path}: session {s['name']}"
        if not isinstance(s["steps"], list) or not s["steps"]:
            raise SpecError(f"{where}: steps must be a non-empty list")
        steps = [_step(f"{where}: step {j}", st) for j, st in enumerate(s["steps"])]
        expect = None
        if s.get("expect") is not None:
            try:
                expect = parse_target(str(s["expect"]))
            except ValueError as e:
                raise SpecError(f"{where}: expect: {e}") from None
        sessions.append(Session(str(s["name"]), str(s["task"]), steps, expect))
    specs.check_unique_sessions(path, sessions, SpecError)
    return AppSpec(str(top["name"]), path, package, activity, sessions, str(top.get("description") or ""),
                   top.get("license"), float(settle), hashlib.sha256(data).hexdigest())


def spec_files(paths: list[Path | str]) -> list[Path]:
    """The spec files named (a folder stands for the `*.yaml` files in it)."""
    return specs.spec_files(paths, "Android app specs", SpecError)


def default_specs() -> list[Path]:
    return sorted(DEFAULT_DIR.glob("*.yaml"))
