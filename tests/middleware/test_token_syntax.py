"""The access token's syntax (RFC 6750 §2.1 b64token), checked on every request without a
regular expression, agrees with the grammar's regular expression on any text."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from mcpauth.middleware._bearer import _is_b64token

B64TOKEN = re.compile(r"[A-Za-z0-9\-._~+/]+=*")
ALPHABET = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~+/= \t,;"\\é\x00'


@given(st.text(alphabet=ALPHABET, max_size=40) | st.text(max_size=40))
def test_the_check_agrees_with_the_grammar(token: str) -> None:
    assert _is_b64token(token) == bool(B64TOKEN.fullmatch(token))


def test_examples() -> None:
    assert _is_b64token("abc.DEF-_~+/==")
    assert not _is_b64token("")
    assert not _is_b64token("==")
    assert not _is_b64token("a=b")
    assert not _is_b64token("a b")
    assert not _is_b64token("café")
