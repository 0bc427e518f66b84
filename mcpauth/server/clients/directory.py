"""Where clients come from: the database, or a Client ID Metadata Document fetched from the
client's own URL (kept in the database too, so grants and the account page can name it); and
where a client's public keys come from (inline JWKS or an SSRF-safe fetch of ``jwks_uri``).

Both fetches are asked for from worker threads but run on the event loop
(``threads.await_on_loop``), through one :class:`FetchGate`: a host that never answers holds
no database thread, concurrent requests for one URL share a fetch, caps decline at once what
would queue, and failures are remembered and counted against the requester's address
(:func:`requests_from` names it)."""

from __future__ import annotations

import json
import logging
import ssl
from collections.abc import Awaitable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from mcpauth.caching import ExpiringCache, wall_clock
from mcpauth.errors import InvalidClient
from mcpauth.server.clients.fetch_admission import FetchDeclined, FetchGate, FetchLimits
from mcpauth.server.clients.metadata_documents import (
    MetadataCache,
    fetcher_for,
    is_cimd_client_id,
    resolve_client_metadata_document,
)
from mcpauth.server.clients.ssrf import FetchedResponse, FetchError
from mcpauth.server.config import Settings
from mcpauth.server.outbound import Outbound
from mcpauth.server.storage.database import Database
from mcpauth.server.storage.lookups import get_client, replace_client
from mcpauth.server.storage.models import Client
from mcpauth.server.threads import await_on_loop

CLIENT_CACHE_SECONDS = 2.0
JWKS_CACHE_SECONDS = 300
JWKS_CACHE_ENTRIES = 1000
log = logging.getLogger(__name__)
_requester: ContextVar[str] = ContextVar("mcpauth_requester", default="unknown")


@contextmanager
def requests_from(address: str) -> Iterator[None]:
    """Fetches started inside (also in worker threads started inside) count against
    ``address``, the requester's address."""
    token = _requester.set(address)
    try:
        yield
    finally:
        _requester.reset(token)


def _load_client(db: Database, client_id: str) -> Client | None:
    with db.read() as session:
        return get_client(session, client_id)


class ClientDirectory:
    def __init__(
        self,
        settings: Settings,
        *,
        outbound: Outbound | None = None,
        ssl_context: ssl.SSLContext | None = None,
        fetch_limits: FetchLimits | None = None,
    ) -> None:
        self._settings = settings
        self._fetcher = fetcher_for(settings, outbound, ssl_context=ssl_context)
        self.gate = FetchGate(self._fetcher, fetch_limits)
        self._documents = MetadataCache()
        self._jwks: ExpiringCache[str, dict[str, Any]] = ExpiringCache(
            JWKS_CACHE_SECONDS, JWKS_CACHE_ENTRIES, clock=wall_clock
        )
        self._clients: ExpiringCache[str, Client | None] = ExpiringCache(CLIENT_CACHE_SECONDS)

    def find(self, db: Database, client_id: str) -> Client | None:
        """The client named ``client_id``; a metadata document URL is resolved (AS-08).

        Raises:
            CIMDError: the URL's document cannot be fetched or is not valid.
        """
        if not is_cimd_client_id(client_id):
            return self._clients.get_or_load(client_id, lambda: _load_client(db, client_id))
        client = resolve_client_metadata_document(
            self._settings, client_id, fetcher=self._fetch, cache=self._documents
        )
        with db.write() as session:
            replace_client(session, client)
        return client

    def _fetch(self, url: str) -> FetchedResponse:
        """``url`` fetched on the event loop through the gate (the calling worker thread's
        call is suspended meanwhile); outside a server request, fetched here.

        Raises:
            FetchError: the fetch failed (now or recently).
            FetchDeclined: a limit is reached.
        """
        requester = _requester.get()

        def start() -> Awaitable[FetchedResponse]:
            return self.gate.fetch(url, requester)

        return await_on_loop(("fetch", url), start, lambda: self._fetcher.get(url))

    def cached(self, client_id: str) -> Client | None:
        """The registered client from memory only; None if it is not cached (or unknown)."""
        return None if is_cimd_client_id(client_id) else self._clients.get(client_id)

    def forget(self, client_id: str) -> None:
        """Drop a cached client (after this process changed or deleted it)."""
        self._clients.forget(client_id)

    def jwks_for(self, client: Client) -> dict[str, Any]:
        """The client's JWKS: registered inline, or fetched from its ``jwks_uri``.

        Raises:
            InvalidClient: no keys, or ``jwks_uri`` cannot be fetched safely.
        """
        if client.jwks is not None:
            return client.jwks
        if client.jwks_uri is None:
            raise InvalidClient("The client has no registered keys")
        cached = self._jwks.get(client.jwks_uri)
        if cached is not None:
            return cached
        try:
            document = json.loads(self._fetch(client.jwks_uri).content)
        except FetchDeclined as exc:
            raise InvalidClient(f"The client's jwks_uri was not fetched: {exc.message}") from exc
        except (FetchError, ValueError) as exc:
            log.warning("jwks_uri %s not usable: %s", client.jwks_uri[:200], exc)
            raise InvalidClient("The client's jwks_uri cannot be fetched") from exc
        if not isinstance(document, dict):
            raise InvalidClient("The client's jwks_uri does not hold a JWKS")
        self._jwks.put(client.jwks_uri, document)
        return document
