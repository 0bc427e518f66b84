"""What ``mcpauth serve`` gives uvicorn besides the application: an HTTP protocol whose writes
within one turn of the event loop leave as one.

uvicorn writes a response's status line and headers when the application sends
``http.response.start`` and its body when it sends ``http.response.body``: two system calls,
two TCP segments and two wake-ups of the client for each answer, which cost a token request a
quarter of its CPU time (bench/client_credentials). An application sends both in the same turn
of the loop, so joining the writes of a turn sends them together, in order, without holding
any of them longer than that turn.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any


class CoalescingTransport(asyncio.Transport):
    """A transport that joins the writes made within one turn of the event loop into one
    write on ``transport`` at the end of that turn. Everything else is ``transport``'s; closing
    (or ``write_eof``) sends what is held first, aborting drops it."""

    def __init__(self, transport: Any, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__()
        # uvloop's transports have asyncio.Transport's methods without subclassing it
        self._transport: asyncio.Transport = transport
        self._loop = loop
        self._held: list[bytes] | None = None

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self._held is None:
            self._held = [bytes(data)]
            self._loop.call_soon(self._flush)
        else:
            self._held.append(bytes(data))

    def writelines(self, list_of_data: Iterable[bytes | bytearray | memoryview]) -> None:
        for data in list_of_data:
            self.write(data)

    def _flush(self) -> None:
        held, self._held = self._held, None
        if held and not self._transport.is_closing():
            self._transport.write(b"".join(held))

    def close(self) -> None:
        self._flush()
        self._transport.close()

    def write_eof(self) -> None:
        self._flush()
        self._transport.write_eof()

    def abort(self) -> None:
        self._held = None
        self._transport.abort()

    def get_write_buffer_size(self) -> int:
        held = sum(len(data) for data in self._held or ())
        return held + self._transport.get_write_buffer_size()

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return self._transport.get_write_buffer_limits()

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        self._transport.set_write_buffer_limits(high, low)

    def can_write_eof(self) -> bool:
        return self._transport.can_write_eof()

    def is_closing(self) -> bool:
        return self._transport.is_closing()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._transport.get_extra_info(name, default)

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self._transport.set_protocol(protocol)

    def get_protocol(self) -> asyncio.BaseProtocol:
        return self._transport.get_protocol()

    def is_reading(self) -> bool:
        return self._transport.is_reading()

    def pause_reading(self) -> None:
        self._transport.pause_reading()

    def resume_reading(self) -> None:
        self._transport.resume_reading()


def http_protocol() -> type[asyncio.Protocol]:
    """The HTTP protocol uvicorn would choose itself (httptools' when it is installed, else
    h11's), each connection's transport a :class:`CoalescingTransport`."""
    base: type[Any]
    try:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol as base
    except ImportError:  # uvicorn without its standard extras
        from uvicorn.protocols.http.h11_impl import H11Protocol as base

    class CoalescingProtocol(base):  # type: ignore[misc]
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            super().connection_made(CoalescingTransport(transport, asyncio.get_running_loop()))

    return CoalescingProtocol
