"""The token endpoint's form parser gives exactly what the standard library's does."""

from __future__ import annotations

from urllib.parse import parse_qsl

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mcpauth.server.http_io import form_pairs

# the characters that mean something in a form, hex digits, and some that are not ASCII
PIECES = st.sampled_from(["%", "+", "&", "=", "%2F", "%3a", "%C3%A9", "%e9", "%zz", "%4", "é", "€"])
TEXT = st.lists(st.one_of(PIECES, st.text(alphabet="aF09 ~-_.\x00", max_size=3)), max_size=12)


@given(TEXT.map("".join))
def test_form_pairs_are_those_of_parse_qsl(text: str) -> None:
    assert form_pairs(text) == parse_qsl(text, keep_blank_values=True)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "&&",
        "a",
        "a=",
        "=b",
        "a=b=c",
        "redirect_uri=http%3A%2F%2F127.0.0.1%2Fcallback&scope=a+b%20c",
        "name=%E2%82%AC%zz%4&x=%2",
        "n%C3%A9=caf%C3%A9&%2B=%2b",
    ],
)
def test_the_edges_of_the_form_grammar(text: str) -> None:
    assert form_pairs(text) == parse_qsl(text, keep_blank_values=True)
