"""The TOTP and recovery-code rules (docs/security.md T46, T47): codes of the current step and
one either side, each step once; what a typed code or recovery code may look like; recovery
codes of 80 random bits, stored as digests of the account and the code."""

from __future__ import annotations

import re

import pyotp
import pytest

from mcpauth.server.identity import methods, totp

NOW = 1_800_000_015  # inside step 60_000_000
STEP = NOW // 30


@pytest.fixture
def secret() -> str:
    return totp.new_enrolment("alice", "Example").secret


def test_the_enrolment_uri_names_the_account_and_service_and_holds_160_bits(secret: str) -> None:
    enrolment = totp.new_enrolment("alice", "Example Corp")
    assert enrolment.uri.startswith("otpauth://totp/Example%20Corp:alice?secret=")
    assert "issuer=Example%20Corp" in enrolment.uri
    assert len(enrolment.secret) == 32  # base32: 160 bits
    assert enrolment.grouped.replace(" ", "") == enrolment.secret
    assert enrolment.secret not in repr(enrolment)


@pytest.mark.parametrize(
    ("offset", "found"), [(-2, False), (-1, True), (0, True), (1, True), (2, False)]
)
def test_a_code_matches_its_step_within_one_step_either_side(
    secret: str, offset: int, found: bool
) -> None:
    typed = pyotp.TOTP(secret).at(NOW + 30 * offset)
    step = totp.matching_step(secret, typed, NOW, after=0)
    assert step == (STEP + offset if found else None)


def test_a_step_already_used_or_older_does_not_match(secret: str) -> None:
    typed = pyotp.TOTP(secret).at(NOW)
    assert totp.matching_step(secret, typed, NOW, after=STEP) is None
    assert totp.matching_step(secret, typed, NOW, after=STEP - 1) == STEP
    earlier = pyotp.TOTP(secret).at(NOW - 30)
    assert totp.matching_step(secret, earlier, NOW, after=STEP) is None


@pytest.mark.parametrize(
    ("typed", "normal"),
    [
        ("123456", "123456"),
        (" 123 456 ", "123456"),
        ("12345", None),
        ("1234567", None),
        ("12345a", None),
        ("١٢٣٤٥٦", None),
        ("", None),
    ],
)
def test_a_typed_code_is_six_ascii_digits(typed: str, normal: str | None) -> None:
    assert totp.normalise_code(typed) == normal


def test_recovery_codes_are_ten_distinct_and_read_back_however_typed() -> None:
    codes = totp.new_recovery_codes()
    assert len(codes) == len(set(codes)) == 10
    for code in codes:
        assert re.fullmatch(r"[a-z2-9]{4}(-[a-z2-9]{4}){3}", code)
        assert not set(code) & set("01ilo")
        assert totp.normalise_recovery_code(code.upper().replace("-", " ")) == code.replace("-", "")
    assert totp.normalise_recovery_code("abcd-efgh-jkmn") is None  # too short
    assert totp.normalise_recovery_code("abcd-efgh-jkmn-pqr0") is None  # 0 is in no code
    assert totp.normalise_recovery_code("a" * 1000) is None


def test_a_recovery_digest_is_bound_to_the_account() -> None:
    code = totp.new_recovery_codes()[0]
    mine = totp.recovery_digest("alice-id", code)
    assert mine == totp.recovery_digest("alice-id", code.upper())
    assert mine != totp.recovery_digest("bob-id", code)
    assert code.replace("-", "") not in mine


@pytest.mark.parametrize(
    ("first", "second", "joined"),
    [
        ("pwd", ["otp"], "pwd otp mfa"),
        ("pwd", methods.passkey(True), "pwd hwk user mfa"),
        ("hwk user", ["otp"], "hwk user otp mfa"),
        ("", ["otp"], "otp mfa"),  # an upstream provider's sign-in, then a code
    ],
)
def test_a_second_factor_adds_its_methods_and_mfa(
    first: str, second: list[str], joined: str
) -> None:
    assert methods.with_second_factor(first, second) == joined
    assert methods.has_two_factors(joined)
    assert not methods.has_two_factors(first)
    assert methods.as_claim(joined) == joined.split()
    assert methods.as_claim("") is None
