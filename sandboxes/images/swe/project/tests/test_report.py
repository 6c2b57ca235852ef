from ledger.report import render, top_accounts


def test_top_accounts():
    bal = {"a": 5, "b": 9, "c": 1, "d": -15}
    assert top_accounts(bal, 2) == [("b", 9), ("a", 5)]


def test_render_lists_every_account():
    out = render({"cash": 1050, "rent": -1050})
    assert out.splitlines() == ["cash          10.50", "rent         -10.50", "total          0.00"]
