"""The token buckets behind ``Limits(user_rate=, tool_rates=)``, on a clock the test moves: a
bucket lets ``burst`` calls through at once and refills at ``calls / per`` a second; several
buckets are taken from all or none; the in-process table is bounded. And ``Rate``: its
grammar (``60/min``, ``10/30s:20``) and what it refuses."""

from __future__ import annotations

from typing import Any

import pytest

from mcpauth.middleware import Limits, Rate
from mcpauth.middleware._token_buckets import MemoryTokenBuckets, ToolLimiter

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def test_a_bucket_lets_its_burst_through_then_refills_at_its_rate() -> None:
    clock = Clock()
    buckets = MemoryTokenBuckets(clock=clock)
    rate = Rate(6, per=60, burst=3)  # one token every 10 s, three at most
    taken = [await buckets.take([("a", rate)]) for _ in range(3)]
    assert taken == [None, None, None]
    assert await buckets.take([("a", rate)]) == (0, pytest.approx(10.0))
    clock.now += 4
    assert await buckets.take([("a", rate)]) == (0, pytest.approx(6.0))  # refusals take nothing
    clock.now += 6
    assert await buckets.take([("a", rate)]) is None
    assert await buckets.take([("a", rate)]) == (0, pytest.approx(10.0))
    clock.now += 3600  # a long pause fills the bucket to its burst, no more
    assert [await buckets.take([("a", rate)]) for _ in range(4)][-1] == (0, pytest.approx(10.0))


async def test_buckets_are_taken_from_all_or_none() -> None:
    clock = Clock()
    buckets = MemoryTokenBuckets(clock=clock)
    user, tool = Rate(10, per=10), Rate(1, per=30)
    assert await buckets.take([("user", user), ("tool", tool)]) is None
    # the tool's bucket is empty: the call is refused and the user's bucket keeps its token
    assert await buckets.take([("user", user), ("tool", tool)]) == (1, pytest.approx(30.0))
    for _ in range(9):
        assert await buckets.take([("user", user)]) is None
    assert await buckets.take([("user", user)]) == (0, pytest.approx(1.0))


async def test_the_in_process_buckets_are_bounded_dropping_the_least_recently_used() -> None:
    clock = Clock()
    buckets = MemoryTokenBuckets(max_keys=2, clock=clock)
    rate = Rate(1, per=60)
    await buckets.take([("a", rate)])
    await buckets.take([("b", rate)])
    await buckets.take([("c", rate)])  # "a" was used least recently: dropped
    assert len(buckets) == 2
    assert await buckets.take([("b", rate)]) == (0, pytest.approx(60.0))  # kept, still empty
    assert await buckets.take([("a", rate)]) is None  # starts again full (and drops "b")
    assert len(buckets) == 2
    with pytest.raises(ValueError, match="at least 1"):
        MemoryTokenBuckets(max_keys=0)


async def test_the_limiter_names_the_limit_that_refused_and_rounds_retry_after_up() -> None:
    clock = Clock()
    limiter = ToolLimiter(
        MemoryTokenBuckets(clock=clock),
        user_rate=Rate(3, per=60),
        tool_rates={"search": Rate(1, per=90), "*": Rate(2, per=60)},
    )
    assert await limiter.refusal("iss", "alice", "search") is None
    assert await limiter.refusal("iss", "alice", "search") == (429, "tool", "90")
    assert await limiter.refusal("iss", "bob", "search") is None  # per user
    assert await limiter.refusal("iss", "alice", "other") is None  # "*": its own bucket
    assert await limiter.refusal("iss", "alice", "third") is None
    assert await limiter.refusal("iss", "alice", "fourth") == (429, "user", "20")
    clock.now += 19.5
    assert await limiter.refusal("iss", "alice", "fourth") == (429, "user", "1")
    without = ToolLimiter(MemoryTokenBuckets(), user_rate=None, tool_rates={"search": Rate(1)})
    assert await without.refusal("iss", "alice", "other") is None  # no rate applies


@pytest.mark.parametrize(
    ("text", "rate"),
    [
        ("60/min", Rate(60, 60.0)),
        ("60/m", Rate(60, 60.0)),
        ("10/30s", Rate(10, 30.0)),
        ("5/s:20", Rate(5, 1.0, 20)),
        ("1000/h:50", Rate(1000, 3600.0, 50)),
        (" 2/Day ", Rate(2, 86400.0)),
        ("3/2minute", Rate(3, 120.0)),
    ],
)
def test_a_rate_is_calls_per_period_with_an_optional_burst(text: str, rate: Rate) -> None:
    parsed = Rate.parse(text)
    assert parsed == rate
    assert parsed.capacity == (rate.burst or rate.calls)
    assert parsed.refill == pytest.approx(rate.calls / rate.per)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("60", "expected a rate"),
        ("60/fortnight", "expected a rate"),
        ("-1/min", "expected a rate"),
        ("1.5/min", "expected a rate"),
        ("٣/min", "expected a rate"),  # digits are ASCII digits
        ("0/min", "at least 1"),
        ("5/min:0", "at least 1"),
        ("5/0s", "positive number of seconds"),
    ],
)
def test_a_rate_that_is_not_of_that_form_is_refused(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Rate.parse(text)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"calls": 0}, "at least 1"),
        ({"calls": 1, "burst": 0}, "at least 1"),
        ({"calls": 1, "per": 0}, "period"),
        ({"calls": 1, "per": float("inf")}, "period"),
        ({"calls": 1, "per": float("nan")}, "period"),
    ],
)
def test_a_rate_refuses_what_no_bucket_can_be(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Rate(**options)


def test_limits_keep_their_own_copy_of_the_tool_rates() -> None:
    rates = {"search": Rate(1)}
    limits = Limits(tool_rates=rates)
    rates["other"] = Rate(2)
    assert dict(limits.tool_rates or {}) == {"search": Rate(1)}
    with pytest.raises(ValueError, match="bucket_table_size"):
        Limits(bucket_table_size=0)
