"""pipelines.sources: parsing JSON as the formats' writers write it."""

from __future__ import annotations

import orjson
import pytest

from pipelines.sources import parse_json


def test_python_nonfinite_numbers_become_null() -> None:
    # Python's json.dump writes these by default; orjson alone refuses them
    doc = b'{"rewards": [1.0, NaN], "f1": Infinity, "low": -Infinity, "name": "NaN and Infinity"}'
    with pytest.raises(orjson.JSONDecodeError):
        orjson.loads(doc)
    assert parse_json(doc) == {"rewards": [1.0, None], "f1": None, "low": None, "name": "NaN and Infinity"}
    assert parse_json(doc.decode()) == parse_json(doc)
    # integers as orjson reads them: beyond 64 bits, a float
    big = b'{"a": NaN, "b": 123456789012345678901234567890, "c": 18446744073709551615, "d": -9223372036854775808}'
    assert parse_json(big) == {"a": None, "b": orjson.loads(b"123456789012345678901234567890"),
                               "c": 18446744073709551615, "d": -9223372036854775808}


def test_json_that_neither_parser_takes_raises_orjsons_error() -> None:
    # nor what orjson refuses for another reason than NaN (a lone surrogate)
    for bad in (b'{"a": NaN', b'{"a": nan}', b'{"a": 1,}', "{'a': NaN}", b'{"a": NaN, "b": "\\ud800"}'):
        with pytest.raises(orjson.JSONDecodeError) as err:
            parse_json(bad)
        assert str(err.value) == _orjson_error(bad)


def _orjson_error(data: bytes | str) -> str:
    try:
        orjson.loads(data)
    except orjson.JSONDecodeError as e:
        return str(e)
    raise AssertionError("orjson parsed it")
