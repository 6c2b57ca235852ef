"""App specs: the bundled one parses to exactly its steps; every mistake is refused naming the file,
the session and the step, before adb is called."""

from __future__ import annotations

from pathlib import Path

import pytest

from collectors.android.spec import (
    ACTION_SPACE,
    SpecError,
    Step,
    Target,
    default_specs,
    load_spec,
    parse_target,
    step_of_call,
)
from collectors.android_views import View


def test_the_bundled_spec() -> None:
    (path,) = default_specs()
    spec = load_spec(path)
    assert (spec.name, spec.package, spec.activity, spec.component, spec.settle_s) == (
        "album", "com.yanzhenjie.album.sample", ".MainActivity", "com.yanzhenjie.album.sample/.MainActivity", 0.5)
    assert [s.name for s in spec.sessions] == ["pick-photoframe", "cancel-picking", "leave-app"]
    first = spec.sessions[0]
    assert first.steps[:4] == [
        Step("tap", target=Target((("desc", "Select Image"),))), Step("tap", target=Target((("id", "btn_switch_dir"),))),
        Step("tap", index=25), Step("tap", target=Target((("id", "cb_album_check"),)), nth=2)]
    assert str(first.steps[5].target) == 'id=album_menu_finish desc="Finish(1 / 9)"'
    assert str(first.expect) == "id=iv_icon"
    assert spec.sessions[2].steps == [Step("back")]


def test_targets() -> None:
    t = parse_target('id=btn_ok text="Sign in now" class=android.widget.Button')
    assert t.constraints == (("id", "btn_ok"), ("text", "Sign in now"), ("class", "android.widget.Button"))
    ok = View(cls="android.widget.Button", resource_id="com.app:id/btn_ok", text="Sign in now")
    assert t.matches(ok)
    assert parse_target("id=com.app:id/btn_ok").matches(ok)
    assert not parse_target("id=ok").matches(ok)  # a suffix of the name is not the name
    assert not t.matches(View(cls="android.widget.Button", resource_id="com.app:id/btn_ok", text="Sign in"))
    for bad in ["", "button", 'text="open', "id=a name=b", "id=a extra"]:
        with pytest.raises(ValueError, match="expected one or more of id="):
            parse_target(bad)


BASE = "name: app\npackage: com.example.app\nactivity: .Main\nsessions:\n  - name: s\n    task: t\n    steps:\n"


@pytest.mark.parametrize(("steps", "message"), [
    ("      - {do: fly}", "session s: step 0: `do` must be one of"),
    ("      - {do: tap}", "session s: step 0: tap needs exactly one of `target`"),
    ("      - {do: tap, target: id=a, index: 3}", "tap needs exactly one of `target`"),
    ("      - {do: tap, index: 3, nth: 2}", "`nth` picks among the views a `target` matches"),
    ("      - {do: tap, target: id=a, nth: 0}", "`nth` must be a whole number from 1, got 0"),
    ("      - {do: tap, index: -1}", "`index` must be a whole number, got -1"),
    ("      - {do: type, target: id=a}", "type needs `text`"),
    ("      - {do: swipe, direction: sideways}", "swipe needs `direction`, one of up, down, left, right"),
    ("      - {do: tap, target: 'button \"OK\"'}", "step 0: target: expected one or more of id="),
    ("      - {do: back, target: id=a}", "step 0: unknown keys ['target']"),
    ("      - {do: back}\n    expect: nothing", "session s: expect: expected one or more of id="),
])
def test_bad_steps(tmp_path: Path, steps: str, message: str) -> None:
    f = tmp_path / "app.yaml"
    f.write_text(BASE + steps + "\n")
    with pytest.raises(SpecError, match=f"^{f}: ") as e:
        load_spec(f)
    assert message in str(e.value)


@pytest.mark.parametrize(("text", "message"), [
    ("name: app\npackage: example\nactivity: .M\nsessions: [{name: s, task: t, steps: [{do: back}]}]", "package must be an Android package name"),
    ("name: app\npackage: com.a.b\nactivity: 'a b'\nsessions: [{name: s, task: t, steps: [{do: back}]}]", "activity must be a class name"),
    ("name: app\npackage: com.a.b\nactivity: .M\nsettle_s: -1\nsessions: [{name: s, task: t, steps: [{do: back}]}]", "settle_s must be a number"),
    ("name: app\npackage: com.a.b\nactivity: .M\nsessions: []", "sessions must be a non-empty list"),
    ("name: app\npackage: com.a.b\nactivity: .M\nsessions: [{name: s, task: t, steps: [{do: back}]}, {name: s, task: u, steps: [{do: home}]}]",
     "session names repeat: ['s']"),
    ("name: app\nsessions: []", "missing keys ['activity', 'package']"),
    ("name: app\npackage: com.a.b\nsessions: [{name: s, task: t, steps: [{do: back}]}]", "missing keys ['activity']"),
    ("name: [unclosed", "cannot read the spec"),
])
def test_bad_specs(tmp_path: Path, text: str, message: str) -> None:
    f = tmp_path / "app.yaml"
    f.write_text(text)
    with pytest.raises(SpecError, match=f"^{f}: ") as e:
        load_spec(f)
    assert message in str(e.value)


def test_an_agents_calls() -> None:
    assert step_of_call("tap", {"index": 12}) == Step("tap", index=12)
    assert step_of_call("tap", {"index": "[12]"}) == Step("tap", index=12)  # as the tree shows it
    assert step_of_call("type", {"index": 3, "text": "hi"}) == Step("type", index=3, text="hi")
    assert step_of_call("swipe", {"direction": "up"}) == Step("swipe", direction="up")
    assert step_of_call("back", None) == Step("back")
    assert step_of_call("scroll", {}) == ("unknown action 'scroll'; the actions are tap, long_press, type, swipe, "
                                          "back, home, enter, launch")
    assert step_of_call("tap", {"index": "first"}) == "tap needs index as a whole number (a view's [index] in the tree)"
    assert step_of_call("type", {"index": 3}) == "type needs text"
    assert step_of_call("swipe", {"direction": "in"}) == "swipe needs direction, one of up, down, left, right"
    assert [t["name"] for t in ACTION_SPACE] == ["tap", "long_press", "type", "swipe", "back", "home", "enter", "launch"]
    assert ACTION_SPACE[2]["inputSchema"]["required"] == ["index", "text"]
