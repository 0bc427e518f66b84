"""User codes (RFC 8628 §6.1): drawn from twenty consonants, shown in two groups of four, read
back leniently, stored under a keyed digest (docs/security.md T45)."""

from __future__ import annotations

import math

import pytest

from mcpauth.server.browser import user_codes
from mcpauth.server.browser.user_codes import (
    ALPHABET,
    ENTROPY_BITS,
    LENGTH,
    display,
    new_user_code,
    normalise,
    user_code_digest,
)


def test_the_alphabet_is_twenty_consonants_without_vowels_or_digits() -> None:
    assert len(set(ALPHABET)) == len(ALPHABET) == 20
    assert not set(ALPHABET) & set("AEIOUY0123456789")
    assert ALPHABET.isupper()


def test_a_code_has_the_entropy_rfc_8628_gives_as_its_example() -> None:
    assert pytest.approx(LENGTH * math.log2(20)) == ENTROPY_BITS
    assert ENTROPY_BITS > 34.5  # 20^8: one chance in 2.56e10 per guess and live code


def test_new_codes_are_well_formed_and_do_not_repeat() -> None:
    codes = [new_user_code() for _ in range(200)]
    assert all(len(code) == LENGTH and set(code) <= set(ALPHABET) for code in codes)
    assert len(set(codes)) == len(codes)
    assert {c for code in codes for c in code} == set(ALPHABET)  # every letter is drawn


def test_codes_are_shown_in_two_groups_of_four() -> None:
    assert display("BCDFGHJK") == "BCDF-GHJK"


@pytest.mark.parametrize(
    "typed",
    [
        "BCDF-GHJK",
        "bcdf-ghjk",
        "bcdfghjk",
        "BCDF GHJK",
        "  bcdf  ghjk \n",
        "B-C-D-F-G-H-J-K",
        "BCDF\u2013GHJK",  # an en dash, as a phone's keyboard may make it
        "bcdf.ghjk",
        "BCDF_GHJK",
    ],
)
def test_typed_codes_are_read_whatever_the_case_and_separators(typed: str) -> None:
    assert normalise(typed) == "BCDFGHJK"


@pytest.mark.parametrize(
    "typed",
    [
        "",
        "BCDF-GHJ",  # too short
        "BCDF-GHJKL",  # too long
        "BCDF-GHJA",  # a vowel
        "BCDF-GHJ1",  # a digit
        "BCDF/GHJK",  # not a separator
        "BCDF-GHJ\u00df",  # upper() would make two letters of it
        "BCDF-GHJ\u212a",  # the Kelvin sign, which lower-cases to k
        "B" * 8 + " " * user_codes.MAX_TYPED_LENGTH,  # past the length read
    ],
)
def test_anything_else_is_no_code(typed: str) -> None:
    assert normalise(typed) is None


def test_the_stored_digest_is_keyed() -> None:
    one = user_code_digest(b"k" * 32, "BCDFGHJK")
    assert one == user_code_digest(b"k" * 32, "BCDFGHJK")
    assert one != user_code_digest(b"j" * 32, "BCDFGHJK")
    assert one != user_code_digest(b"k" * 32, "BCDFGHJL")
    assert "BCDFGHJK" not in one
    assert len(one) == 64
