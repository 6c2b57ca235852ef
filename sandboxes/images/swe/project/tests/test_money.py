import pytest
from ledger.money import format_amount, parse_amount


def test_parse_simple():
    assert parse_amount("12.5") == 1250
    assert parse_amount("-3") == -300
    assert parse_amount(" 0.07 ") == 7


def test_parse_thousands_separator():
    assert parse_amount("1,234.56") == 123456


def test_parse_rejects_garbage():
    with pytest.raises(ValueError):
        parse_amount("12.345")
    with pytest.raises(ValueError):
        parse_amount("abc")


def test_format():
    assert format_amount(123456) == "1,234.56"
    assert format_amount(-5) == "-0.05"
