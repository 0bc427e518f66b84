"""Caching shared by the three parts: HTTP freshness (the CIMD document cache, the middleware's
JWKS cache) and ExpiringCache, the one in-memory cache with per-entry expiry."""

from __future__ import annotations

import httpx2
import pytest

from mcpauth.caching import ExpiringCache, cache_directives, freshness_lifetime
from mcpauth.key_sets import cache_lifetime as jwks_lifetime

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
    headers = httpx2.Headers({"cache-control": cache_control} if cache_control else {})
    assert jwks_lifetime(headers, now=NOW, default=300.0, floor=30.0, ceiling=86400.0) == seconds


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_each_entry_expires_on_its_own() -> None:
    clock = _Clock()
    cache: ExpiringCache[str, int] = ExpiringCache(10, clock=clock)
    cache.put("default", 1)
    cache.put("short", 2, ttl=1)
    cache.put("absolute", 3, expires_at=clock.now + 5)
    clock.now += 2
    assert (cache.get("default"), cache.get("short"), cache.get("absolute")) == (1, None, 3)
    clock.now += 4
    assert (cache.get("default"), cache.get("absolute")) == (1, None)
    clock.now += 5
    assert cache.get("default") is None
    assert len(cache) == 0  # expired entries met by get are dropped


def test_an_entry_already_expired_is_not_kept() -> None:
    clock = _Clock()
    cache: ExpiringCache[str, int] = ExpiringCache(10, clock=clock)
    cache.put("a", 1)
    cache.put("a", 2, expires_at=clock.now - 1)
    assert cache.get("a") is None
    assert len(cache) == 0


def test_the_least_recently_used_entry_leaves_first() -> None:
    cache: ExpiringCache[str, int] = ExpiringCache(60, max_entries=2)
    cache.put("a", 1)
    cache.put("b", 2)
    assert cache.get("a") == 1  # a is now the most recently used
    cache.put("c", 3)
    assert (cache.get("a"), cache.get("b"), cache.get("c")) == (1, None, 3)


def test_a_loaded_none_is_cached_like_any_value() -> None:
    loads: list[str] = []
    cache: ExpiringCache[str, int | None] = ExpiringCache(60)

    def load() -> None:
        loads.append("x")

    assert cache.get_or_load("unknown", load) is None
    assert cache.get_or_load("unknown", load) is None
    assert loads == ["x"]


def test_stale_entries_stay_for_a_fallback_only_when_asked() -> None:
    clock = _Clock()
    keeping: ExpiringCache[str, int] = ExpiringCache(10, clock=clock, keep_stale=True)
    dropping: ExpiringCache[str, int] = ExpiringCache(10, clock=clock)
    for cache in (keeping, dropping):
        cache.put("k", 7)
    clock.now += 30
    assert keeping.get("k") is None
    assert keeping.get_stale("k") == (7, 30.0)
    assert dropping.get("k") is None
    assert dropping.get_stale("k") is None
