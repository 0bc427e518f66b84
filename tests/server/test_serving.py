"""mcpauth serve's HTTP protocol: uvicorn's, with the writes of one turn of the event loop sent
as one (a response's head and body together), in order, and nothing held past that turn."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
from collections.abc import Iterator
from typing import Any

import httpx2
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from mcpauth.server.serving import CoalescingTransport, http_protocol


class Recording:
    """The transport under test: records what it is asked to do."""

    def __init__(self) -> None:
        self.calls: list[Any] = []
        self.closing = False

    def write(self, data: bytes) -> None:
        self.calls.append(data)

    def close(self) -> None:
        self.calls.append("close")
        self.closing = True

    def abort(self) -> None:
        self.calls.append("abort")
        self.closing = True

    def is_closing(self) -> bool:
        return self.closing

    def get_write_buffer_size(self) -> int:
        return 7

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 1234) if name == "peername" else default


async def _turn() -> None:
    await asyncio.sleep(0)


@pytest.mark.anyio
async def test_writes_of_one_turn_leave_as_one_write_at_its_end() -> None:
    under = Recording()
    transport = CoalescingTransport(under, asyncio.get_running_loop())
    transport.write(b"HTTP/1.1 200 OK\r\n\r\n")
    transport.writelines([b"{", bytearray(b"}")])
    assert under.calls == []
    assert transport.get_write_buffer_size() == 7 + 21
    await _turn()
    assert under.calls == [b"HTTP/1.1 200 OK\r\n\r\n{}"]
    transport.write(b"next")  # a later turn: a write of its own
    await _turn()
    assert under.calls[1:] == [b"next"]
    assert transport.get_extra_info("peername") == ("127.0.0.1", 1234)


@pytest.mark.anyio
async def test_closing_sends_what_is_held_first_and_aborting_drops_it() -> None:
    under = Recording()
    transport = CoalescingTransport(under, asyncio.get_running_loop())
    transport.write(b"last words")
    transport.close()
    await _turn()
    assert under.calls == [b"last words", "close"]
    dropped = Recording()
    transport = CoalescingTransport(dropped, asyncio.get_running_loop())
    transport.write(b"never sent")
    transport.abort()
    await _turn()
    assert dropped.calls == ["abort"]


async def _body(request: Request) -> Response:
    return Response(await request.body(), media_type="application/octet-stream")


async def _chunks(request: Request) -> StreamingResponse:
    async def parts() -> Any:
        for n in range(3):
            yield f"part {n};".encode()
            await asyncio.sleep(0)  # each its own turn

    return StreamingResponse(parts())


APP = Starlette(
    routes=[
        Route("/json", lambda request: JSONResponse({"a": 1})),
        Route("/echo", _body, methods=["POST"]),
        Route("/chunks", _chunks),
    ]
)


@contextlib.contextmanager
def served() -> Iterator[str]:
    """APP under uvicorn with mcpauth serve's protocol, in a thread; its base URL."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    config = uvicorn.Config(APP, http=http_protocol(), log_level="warning", lifespan="off")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


def test_uvicorn_with_the_protocol_answers_on_kept_and_closed_connections() -> None:
    big = bytes(range(256)) * 1024  # 256 KiB: more than a socket takes at once
    with served() as base, httpx2.Client(base_url=base, timeout=10) as http:
        for _ in range(3):  # one connection, kept alive
            assert http.get("/json").json() == {"a": 1}
        assert http.post("/echo", content=big).content == big
        assert http.get("/chunks").text == "part 0;part 1;part 2;"
        closed = http.get("/json", headers={"Connection": "close"})
        assert closed.json() == {"a": 1}
        assert closed.headers["connection"] == "close"
        assert http.get("/json").status_code == 200  # on a new connection
