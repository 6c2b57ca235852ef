"""Android `uiautomator dump` XML, read through `pipelines.reader.read_path`.

There is no sample file; the files under tests/data/uiautomator were written in the exact shape
`uiautomator dump` produces (one line, every attribute on every node). Expected view counts were
taken from the raw files independently of the importer:
  grep -o '<node ' FILE | wc -l -> settings_wifi 17, login_tty 6, two_dumps 19 (2 + 17)
A dump is a screen state, not a trajectory: each becomes a trajectory with zero turns whose
initial_state is the rendered hierarchy (one line per node).
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pyarrow as pa

from collectors.android_views import render_tree
from collectors.base import ImportContext
from collectors.droidbot import views_to_tree
from collectors.uiautomator import UiAutomatorImporter
from pipelines.reader import read_path
from schemas.records import QuarantineRecord, Trajectory, TrajectoryBuffer
from schemas.validate import validate

DATA = Path(__file__).resolve().parent.parent / "data" / "uiautomator"


def _trajs(path: Path) -> list[Trajectory]:
    recs = list(read_path(path))
    assert recs and all(isinstance(r, Trajectory) for r in recs), [getattr(r, "detail", r) for r in recs]
    return recs


def test_settings_dump() -> None:
    (t,) = _trajs(DATA / "settings_wifi.xml")
    assert t.domain == "android" and t.source_format == "uiautomator"
    assert t.turns == [] and t.locator == "$"
    lines = t.initial_state.split("\n")
    assert len(lines) == 17
    assert lines[0] == "[0] android.widget.FrameLayout bounds=[0,0][1080,2340]"
    assert (
        '        [8] android.widget.Switch id=com.android.settings:id/switch_widget text="ON" '
        "bounds=[891,322][1017,427] clickable checkable checked focusable"
    ) in lines
    assert (
        '          [11] android.widget.TextView id=android:id/title text="Home & Office" bounds=[189,504][555,571]'
        in lines
    )
    assert '[14] android.widget.TextView id=android:id/title text="Café \\"Guest\\""' in t.initial_state
    meta = json.loads(t.metadata)
    assert meta == {
        "rotation": 0,
        "hierarchy_attributes": {"rotation": "0"},
        "packages": ["com.android.settings"],
        "num_views": 17,
    }
    buf = TrajectoryBuffer()
    buf.add(t, "test", "uiautomator", "1")
    assert validate(pa.Table.from_batches([buf.traj.take()]), "trajectories") == []


def test_tty_dump_with_trailer_and_flags() -> None:
    """`adb exec-out uiautomator dump /dev/tty`: the tool's message follows the XML; an older
    device without `long-clickable`; a password field, a disabled button, a multi-line text."""
    (t,) = _trajs(DATA / "login_tty.xml")
    assert t.initial_state.split("\n") == [
        "[0] android.widget.FrameLayout bounds=[0,0][1920,1080]",
        '  [1] android.widget.TextView id=com.example.login:id/headline text="Welcome back.\\nPlease sign in." bounds=[60,40][900,200]',
        '  [2] android.widget.EditText id=com.example.login:id/email text="alice@example.com" bounds=[60,240][900,340] clickable focusable focused',
        '  [3] android.widget.EditText id=com.example.login:id/password text="••••••" bounds=[60,360][900,460] clickable focusable password',
        '  [4] android.widget.Button id=com.example.login:id/sign_in text="SIGN IN" bounds=[60,500][900,600] clickable focusable disabled',
        "  [5] android.view.View bounds=[1800,20][1900,120] clickable",
    ]
    meta = json.loads(t.metadata)
    assert meta["rotation"] == 1 and meta["trailing_text"] == "UI hierchary dumped to: /dev/tty"


def test_concatenated_dumps() -> None:
    trajs = _trajs(DATA / "two_dumps.xml")
    assert [t.locator for t in trajs] == ["hierarchy:1", "hierarchy:2"]
    assert [len(t.initial_state.split("\n")) for t in trajs] == [2, 17]
    assert trajs[0].trajectory_id != trajs[1].trajectory_id
    assert json.loads(trajs[0].metadata)["packages"] == ["com.google.android.apps.nexuslauncher"]


def test_truncated_dump_is_quarantined() -> None:
    (q,) = list(read_path(DATA / "truncated.xml"))
    assert isinstance(q, QuarantineRecord) and q.reason == "invalid_xml" and q.importer == "uiautomator"
    assert "line 1 column" in q.detail


def test_dtd_and_entities_are_refused() -> None:
    (q,) = list(read_path(DATA / "doctype_entities.xml"))
    assert isinstance(q, QuarantineRecord) and q.reason == "unsafe_xml" and q.importer == "uiautomator"


def test_sniff() -> None:
    imp = UiAutomatorImporter()
    assert imp.sniff((DATA / "settings_wifi.xml").read_bytes()[:65536])
    assert imp.sniff(b'<hierarchy rotation="0">\n  <node index="0" bounds="[0,0][1,1]"/>\n</hierarchy>')
    assert not imp.sniff(b'<?xml version="1.0"?><rss version="2.0"><channel/></rss>')
    assert not imp.sniff(b'{"version": 2, "width": 80, "height": 24}\n')


def test_same_rendering_as_droidbot() -> None:
    """A DroidBot state and a uiautomator dump of the same screen render identically."""
    droidbot_views = [
        {
            "temp_id": 0,
            "parent": -1,
            "children": [1],
            "class": "android.widget.FrameLayout",
            "bounds": [[0, 0], [1080, 1920]],
            "enabled": True,
            "visible": True,
            "clickable": False,
        },
        {
            "temp_id": 1,
            "parent": 0,
            "children": [],
            "class": "android.widget.CheckBox",
            "resource_id": "app:id/agree",
            "text": "I agree",
            "content_description": None,
            "bounds": [[40, 100], [600, 180]],
            "enabled": True,
            "visible": True,
            "checkable": True,
            "checked": True,
            "clickable": True,
            "focusable": True,
        },
    ]
    xml = (
        b"<?xml version='1.0' encoding='UTF-8' standalone='yes' ?><hierarchy rotation=\"0\">"
        b'<node index="0" text="" resource-id="" class="android.widget.FrameLayout" package="app" content-desc="" '
        b'checkable="false" checked="false" clickable="false" enabled="true" focusable="false" focused="false" '
        b'scrollable="false" long-clickable="false" password="false" selected="false" bounds="[0,0][1080,1920]">'
        b'<node index="0" text="I agree" resource-id="app:id/agree" class="android.widget.CheckBox" package="app" '
        b'content-desc="" checkable="true" checked="true" clickable="true" enabled="true" focusable="true" '
        b'focused="false" scrollable="false" long-clickable="false" password="false" selected="false" '
        b'bounds="[40,100][600,180]" /></node></hierarchy>'
    )
    imp = UiAutomatorImporter()
    ctx = ImportContext(source="mem", input_sha256="0" * 64)
    ((loc, rec),) = list(imp.split(io.BytesIO(xml), ctx))
    t = imp.convert(rec, loc, ctx)
    assert t.initial_state == render_tree(views_to_tree(droidbot_views, "state"))
    assert t.initial_state == (
        "[0] android.widget.FrameLayout bounds=[0,0][1080,1920]\n"
        '  [1] android.widget.CheckBox id=app:id/agree text="I agree" bounds=[40,100][600,180] clickable checkable checked focusable'
    )


def _node(cls: str, bounds: str, children: str = "", **attrs: str) -> str:
    extra = "".join(f' {k.replace("_", "-")}="{v}"' for k, v in attrs.items())
    return (f'<node index="0" class="{cls}" package="com.android.settings" enabled="true" bounds="{bounds}"{extra}'
            + (f">{children}</node>" if children else " />"))


def test_windows_dump(tmp_path: Path) -> None:
    # `uiautomator dump --windows`: <displays><display><window ...><hierarchy>nodes</hierarchy></window>...
    settings = _node("android.widget.FrameLayout", "[0,0][1080,2400]",
                     _node("android.widget.TextView", "[0,300][1080,420]", text="Network &amp; internet", clickable="true"))
    status = _node("android.widget.TextView", "[40,0][160,63]", content_desc="12:00")
    xml = ("<?xml version='1.0' encoding='UTF-8' standalone='yes' ?><displays><display id=\"0\">"
           f'<window index="0" title="Settings" type="TYPE_APPLICATION" active="true" focused="true">'
           f'<hierarchy rotation="1">{settings}</hierarchy></window>'
           f'<window index="1" title="StatusBar" type="TYPE_SYSTEM" active="false" focused="false">'
           f'<hierarchy rotation="1">{status}</hierarchy></window></display></displays>')
    (tmp_path / "window_dump.xml").write_text(xml)
    (t,) = _trajs(tmp_path / "window_dump.xml")
    assert t.source_format == "uiautomator" and t.domain == "android" and t.turns == []
    assert t.initial_state == "\n".join([
        'window 0 "Settings" TYPE_APPLICATION active focused',
        "[0] android.widget.FrameLayout bounds=[0,0][1080,2400]",
        '  [1] android.widget.TextView text="Network & internet" bounds=[0,300][1080,420] clickable',
        'window 1 "StatusBar" TYPE_SYSTEM',
        '[0] android.widget.TextView desc="12:00" bounds=[40,0][160,63]',
    ])
    meta = json.loads(t.metadata)
    assert meta["num_views"] == 3 and meta["rotation"] == 1
    assert [(w["display"], w["index"], w["title"]) for w in meta["windows"]] == [("0", "0", "Settings"), ("0", "1", "StatusBar")]
