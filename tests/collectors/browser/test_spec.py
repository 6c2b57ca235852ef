"""Browser task specs: checked when loaded, errors naming file, session and step; refs found in a tree."""

from __future__ import annotations

from pathlib import Path

import pytest

from collectors.browser.session import find_ref
from collectors.browser.spec import SpecError, Target, default_specs, load_spec, parse_target

SHOP = """name: shop
site: site
sessions:
  - name: one
    task: t
    steps:
{steps}
"""


def _spec(tmp_path: Path, steps: str) -> Path:
    (tmp_path / "site").mkdir(exist_ok=True)
    (tmp_path / "site" / "index.html").write_text("<p>hi</p>")
    p = tmp_path / "s.yaml"
    p.write_text(SHOP.format(steps=steps))
    return p


def test_the_bundled_spec_loads() -> None:
    (path,) = default_specs()
    spec = load_spec(path)
    assert (spec.name, spec.origin, [s.name for s in spec.sessions]) == (
        "shop", "http://shop.test", ["order-mugs", "search-socks", "checkout-mistakes", "dead-ends"])
    assert sorted(spec.files) == ["/cart.html", "/done.html", "/index.html", "/product.html", "/search.html",
                                  "/shop.js"]
    assert [len(s.steps) for s in spec.sessions] == [7, 5, 9, 8]
    assert spec.sessions[0].steps[1].target == Target("spinbutton", "Quantity")


@pytest.mark.parametrize(("steps", "message"), [
    ("      - {do: tap, target: 'button \"a\"'}", "step 0: `do` must be one of"),
    ("      - {do: click}", "step 0: click needs exactly one of `target`"),
    ("      - {do: fill, target: 'textbox \"a\"'}", "step 0: fill needs `value`"),
    ("      - {do: click, target: 'Button a'}", "step 0: target: expected `role \"name\"`"),
    ("      - {do: click, ref: x1}", "step 0: ref must look like e12"),
    ("      - {do: goto, url: /a, ref: e1}", "step 0: unknown keys ['ref']"),
    ("      - {do: fill, target: 'textbox', value: 3}", "step 0: `value` must be text"),
    ("      - {do: goto, url: cart.html}", "step 0: url must be a path on the site (/cart.html) or a whole URL"),
])
def test_a_bad_step_names_file_session_and_step(tmp_path: Path, steps: str, message: str) -> None:
    p = _spec(tmp_path, steps)
    with pytest.raises(SpecError) as e:
        load_spec(p)
    assert str(e.value).startswith(f"{p}: session one: {message}")


def test_start_page_and_origin(tmp_path: Path) -> None:
    p = _spec(tmp_path, "      - {do: click, ref: e1}")
    p.write_text(p.read_text().replace("    task: t\n", "    task: t\n    start: cart.html\n"))
    with pytest.raises(SpecError, match=r"session one: start must be a path on the site, starting with / \(got 'cart.html'\)"):
        load_spec(p)
    p.write_text("origin: http://t.test:80\n" + SHOP.format(steps="      - {do: click, ref: e1}"))
    assert load_spec(p).origin == "http://t.test"  # the scheme's own port, as the browser writes URLs
    p.write_text("origin: http://t.test:8080\n" + SHOP.format(steps="      - {do: click, ref: e1}"))
    assert load_spec(p).origin == "http://t.test:8080"


@pytest.mark.parametrize(("edit", "message"), [
    # found only at the corpus write, after every session ran: the whole run was lost
    (lambda t: "license: [a, b]\n" + t, "license: expected text, got list"),
    (lambda t: "action_timeout_s: .nan\n" + t, "action_timeout_s: expected a finite number, got nan"),
    (lambda t: "action_timeout_s: .inf\n" + t, "action_timeout_s: expected a finite number, got inf"),
    (lambda t: t.replace("    task: t\n", "    task:\n"), "sessions[0]: task is blank"),
    (lambda t: t.replace("  - name: one\n", "  - name:\n"), "sessions[0]: name is blank"),
    (lambda t: t + "    expect: {text: 12}\n", "session one: expect.text must be text, got 12"),
    (lambda t: t + "    expect: {path: done.html}\n", "session one: expect.path must be a path on the site, starting with /"),
    (lambda t: t + "    expect: {path: '/done.html?x'}\n", "session one: expect.path must be a path on the site"),
])
def test_spec_values_of_the_wrong_type_are_refused_before_chromium(tmp_path: Path, edit: object, message: str) -> None:
    """A blank task was recorded as "None"; a text `expect` of 12 crashed after the session; a relative
    or query `expect.path` marked every successful run failure."""
    p = _spec(tmp_path, "      - {do: click, ref: e1}")
    p.write_text(edit(p.read_text()))  # type: ignore[operator]
    with pytest.raises(SpecError) as e:
        load_spec(p)
    assert str(e.value).startswith(f"{p}: {message}"), str(e.value)


def test_a_missing_site_folder(tmp_path: Path) -> None:
    p = tmp_path / "s.yaml"
    p.write_text(SHOP.format(steps="      - {do: click, ref: e1}"))
    with pytest.raises(SpecError, match=r"s\.yaml: site: .*/site is not a folder"):
        load_spec(p)


def test_targets_and_refs() -> None:
    assert parse_target('button "Say \\"hi\\""') == Target("button", 'Say "hi"')
    assert parse_target("paragraph") == Target("paragraph")
    tree = """- generic [active] [ref=e1]:
  - heading "Results for \\"shirt\\"" [level=2] [ref=f1e8]
  - link "Cart (0)" [ref=e6] [cursor=pointer]:
    - /url: cart.html
  - spinbutton "Quantity" [ref=e10]: "1"
  - option "Small"
  - link "Cart (0)" [ref=e7]"""
    assert find_ref(tree, Target("heading", 'Results for "shirt"')) == "f1e8"
    assert find_ref(tree, Target("link", "Cart (0)")) == "e6"  # the first in document order
    assert find_ref(tree, Target("spinbutton", "Quantity")) == "e10"
    assert find_ref(tree, Target("generic")) == "e1"
    assert find_ref(tree, Target("option", "Small")) is None  # shown, but nothing to act on
    assert find_ref(tree, Target("link", "Cart")) is None
    assert find_ref(tree, Target("link")) is None  # a role alone: an element of it without a name
    assert find_ref('- textbox "Email" [ref=e2]\n- textbox [ref=e3]', Target("textbox")) == "e3"
    # lines YAML quotes (a name with ": " or "#"), as Playwright writes them
    quoted = """- generic [ref=e1]:
  - 'button "Total: $5" [ref=e2]'
  - 'heading "It''s #1: here" [level=1] [ref=e3]':
    - text: x"""
    assert find_ref(quoted, Target("button", "Total: $5")) == "e2"
    assert find_ref(quoted, Target("heading", "It's #1: here")) == "e3"
    # ... and a quoted line that carries a value (a filled text field): it was never matched
    filled = """- generic [ref=e1]:
  - 'textbox "Note: required" [ref=e4]': hello
  - 'textbox "Promo code: optional" [ref=e5]': "SAVE: 10"
  - textbox "Plain" [ref=e6]: typed"""
    assert find_ref(filled, Target("textbox", "Note: required")) == "e4"
    assert find_ref(filled, Target("textbox", "Promo code: optional")) == "e5"
    assert find_ref(filled, Target("textbox", "Plain")) == "e6"


def test_an_unknown_session_is_refused_before_chromium_starts(tmp_path: Path) -> None:
    from collectors.browser.collect import collect

    with pytest.raises(ValueError) as e:
        collect(default_specs(), tmp_path / "c", only=["order-mugs", "order-mug"])
    assert str(e.value).startswith("--session order-mug: no such session in ")
    assert "the sessions are shop/order-mugs, shop/search-socks, shop/checkout-mistakes, shop/dead-ends" in str(e.value)
    assert not (tmp_path / "c").exists()


def test_fault_options_read_as_mcp_reads_them() -> None:
    from collectors.browser.session import FaultPlan

    assert FaultPlan.parse("all", None, 3) == FaultPlan(("http_error",), 0.25, 3)
    assert FaultPlan.parse("none", None, 3) == FaultPlan.parse("", 0, 3) == FaultPlan((), 0.25, 3)
    # a rate with no kinds ran with no faults and exited 0; `collect mcp` refuses it, and so does this
    for kinds in ("none", "", None):
        with pytest.raises(ValueError, match=r"^--fault-rate 0.5 without --faults: a rate with no fault kinds injects "
                                             r"nothing; name them with --faults KIND,... or --faults all \(known: http_error\)$"):
            FaultPlan.parse(kinds, 0.5, 3)
    with pytest.raises(ValueError, match=r"unknown browser fault kind\(s\) \['latency'\]; known: \['http_error'\]"):
        FaultPlan.parse("http_error,latency", None, 0)


def test_two_specs_of_one_name_are_refused(tmp_path: Path) -> None:
    """Two copies of a spec (one name, one content) gave two trajectories of one id: refused before
    chromium starts, naming both files. One file named twice is one spec."""
    from collectors.browser.collect import collect

    p = _spec(tmp_path, "      - {do: click, ref: e1}")
    copy = tmp_path / "copy.yaml"
    copy.write_text(p.read_text())
    with pytest.raises(ValueError) as e:
        collect([p, copy], tmp_path / "out")
    assert str(e.value) == f"{p} and {copy} are both named 'shop': give each spec its own name"
    assert not (tmp_path / "out").exists()
