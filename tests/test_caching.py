"""HTTP freshness shared by the CIMD document cache and the middleware's JWKS cache."""

from __future__ import annotations

import httpx
import pytest

from mcpauth.caching import cache_directives, freshness_lifetime
from mcpauth.middleware.jwks import cache_lifetime as jwks_lifetime

NOW = 1772366400.0  # 2026-03-01 12:00:00 UTC


@pytest.mark.parametrize(
    ("headers", "seconds"),
    [
        ({}, None),
        ({"cache-control": "public"}, None),
        ({"cache-control": "no-store"}, 0.0),
        ({"cache-control": "max-age=600, no-cache"}, 0.0),
        ({"cache-control": "max-age=600"}, 600.0),
        ({"cache-control": 'public, MAX-AGE="90"'}, 90.0),
        ({"cache-control": "max-age=600, s-maxage=30"}, 30.0),
        ({"cache-control": "max-age=-5"}, 0.0),
        ({"cache-control": "max-age=\u00b2"}, 0.0),  # a digit to str.isdigit, not to float()
        ({"cache-control": "max-age=\u0661\u0662"}, 0.0),  # Arabic-Indic digits: not delta-seconds
        ({"cache-control": "max-age=600, max-age=10"}, 600.0),
        ({"expires": "Sun, 01 Mar 2026 13:00:00 GMT"}, 3600.0),
        (
            {"expires": "Sun, 01 Mar 2026 13:00:00 GMT", "date": "Sun, 01 Mar 2026 12:30:00 GMT"},
            1800.0,
        ),
        ({"expires": "0"}, 0.0),
        ({"expires": "Sun, 01 Mar 2026 13:00:00 GMT", "cache-control": "max-age=120"}, 120.0),
    ],
)
def test_freshness_lifetime_follows_rfc_9111(
    headers: dict[str, str], seconds: float | None
) -> None:
    assert freshness_lifetime(headers, NOW) == seconds  # lowercase names, as httpx gives them


def test_directives_are_case_insensitive_and_unquoted() -> None:
    assert cache_directives('Public, Max-Age="60", no-transform') == {
        "public": "",
        "max-age": "60",
        "no-transform": "",
    }


@pytest.mark.parametrize(
    ("cache_control", "seconds"),
    [("", 300.0), ("max-age=5", 30.0), ("no-store", 30.0), ("max-age=999999", 86400.0)],
)
def test_jwks_lifetime_keeps_keys_within_its_bounds(cache_control: str, seconds: float) -> None:
    headers = httpx.Headers({"cache-control": cache_control} if cache_control else {})
    assert jwks_lifetime(headers, default=300.0, floor=30.0, ceiling=86400.0) == seconds
