"""The one bounded ASGI body reader (mcpauth.asgi) that the server and the middleware share."""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import Any

import pytest

from mcpauth.asgi import BodyIncomplete, BodyTooLarge, read_capped_body

pytestmark = pytest.mark.anyio


def _receiver(*messages: dict[str, Any]) -> Any:
    queue = list(messages)

    async def receive() -> MutableMapping[str, Any]:
        return queue.pop(0)

    return receive


def _chunk(body: bytes, more: bool) -> dict[str, Any]:
    return {"type": "http.request", "body": body, "more_body": more}


async def test_a_body_in_chunks_is_read_whole() -> None:
    receive = _receiver(_chunk(b"ab", True), _chunk(b"cd", False))
    assert await read_capped_body(receive, 4) == b"abcd"


async def test_a_body_past_the_bound_is_refused_without_reading_further() -> None:
    receive = _receiver(_chunk(b"abc", True), _chunk(b"de", True))
    with pytest.raises(BodyTooLarge):
        await read_capped_body(receive, 4)


@pytest.mark.parametrize("declared", ["5", "-1", "1e3", "four"])
async def test_a_declared_length_past_the_bound_or_not_a_number_is_refused_first(
    declared: str,
) -> None:
    with pytest.raises(BodyTooLarge):
        await read_capped_body(_receiver(), 4, declared_length=declared)


async def test_a_disconnect_gives_what_came_before_it() -> None:
    receive = _receiver(_chunk(b"ab", True), {"type": "http.disconnect"})
    with pytest.raises(BodyIncomplete) as caught:
        await read_capped_body(receive, 4)
    assert caught.value.partial == b"ab"
