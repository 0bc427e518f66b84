"""Where clients come from: the database, or a Client ID Metadata Document fetched from the
client's own URL (kept in the database too, so grants and the account page can name it); and
where a client's public keys come from (inline JWKS, or its ``jwks_uri`` kept in the one
key-set cache, :mod:`mcpauth.key_sets`, and fetched through the gate below).

Load, then transact: what needs the network is loaded on the event loop (:meth:`load_document`,
:meth:`load_keys`) before the request's worker thread starts, and handed to it as a
:class:`Loaded`; the worker thread's :meth:`find` and :meth:`jwks_for` read that and memory,
and never fetch. Every fetch passes one :class:`FetchGate`: a host that never answers holds no
database thread, concurrent requests for one URL share a fetch, caps decline at once what would
queue, and failures are remembered and counted against the requester's address."""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field

from mcpauth import jwt
from mcpauth.caching import ExpiringCache, wall_clock
from mcpauth.errors import FetchDeclined, InvalidClient, TemporarilyUnavailable
from mcpauth.key_sets import KeySetCache, KeySetPolicy
from mcpauth.server.clients.fetch_admission import FetchGate, FetchLimits
from mcpauth.server.clients.metadata_documents import (
    CIMDError,
    MetadataCache,
    cached_client,
    check_before_fetch,
    client_from_response,
    fetch_failed,
    fetcher_for,
    is_cimd_client_id,
)
from mcpauth.server.clients.ssrf import FetchedResponse, FetchError
from mcpauth.server.config import Settings
from mcpauth.server.outbound import Outbound
from mcpauth.server.storage.database import Database
from mcpauth.server.storage.lookups import get_client, replace_client
from mcpauth.server.storage.models import Client
from mcpauth.server.threads import run_blocking
from mcpauth.uris import MalformedURL, parse_url

CLIENT_CACHE_SECONDS = 2.0
KEYS_UNAVAILABLE = "The client's jwks_uri cannot be fetched"
KEYS_MAX_BACKOFF = 60.0  # a client's own URL: backed off no longer than a minute
KeySet = dict[str, jwt.VerificationKey]


@dataclass(frozen=True)
class Loaded:
    """What the network gave one request, loaded on the event loop before its worker thread
    starts: metadata-document clients by URL and client key sets by ``jwks_uri``, each or the
    error to raise in its place (raised in the worker thread, where the failure is counted)."""

    documents: Mapping[str, Client | InvalidClient] = field(default_factory=dict)
    key_sets: Mapping[str, KeySet | InvalidClient] = field(default_factory=dict)


NOTHING_LOADED = Loaded()


class NotLoaded(RuntimeError):
    """A worker thread needed a client's metadata document that was not loaded before it
    started. A programming error: the caller must :meth:`ClientDirectory.load_document` on
    the event loop first; worker threads never fetch."""


def _load_client(db: Database, client_id: str) -> Client | None:
    """The registered client ``client_id``; None when there is none, or it is disabled (an
    administrator's ``mcpauth clients disable``: refused everywhere as an unknown client)."""
    with db.read() as session:
        client = get_client(session, client_id)
    return None if client is None or client.disabled else client


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
        # the server's defaults (kept at most five minutes, an unknown kid refetching at most
        # once a minute, 1,000 URLs), on the client's own fetch deadline
        policy = KeySetPolicy(
            KEYS_UNAVAILABLE, max_backoff=KEYS_MAX_BACKOFF, deadline=settings.cimd_timeout
        )
        self._keys = KeySetCache(
            self.gate.fetch_json, jwt.key_set, policy, clock=wall_clock, name="client keys"
        )
        self._clients: ExpiringCache[str, Client | None] = ExpiringCache(CLIENT_CACHE_SECONDS)

    # On the event loop: everything that needs the network.

    async def _fetch(self, url: str, address: str) -> FetchedResponse:
        """``url`` fetched through the gate for the requester at ``address``.

        Raises:
            FetchError: the fetch failed (now or recently).
            FetchDeclined: a limit is reached.
        """
        return await self.gate.fetch(url, address)

    async def load_document(self, client_id: str, address: str) -> Client | InvalidClient:
        """The unsaved client a metadata document URL describes, fetched (when not cached)
        for the requester at ``address``; or the error that refuses it (AS-08). Nothing is
        fetched for a URL that breaks a rule."""
        try:
            parse_url(client_id)
        except MalformedURL as exc:
            return InvalidClient(f"The client_id is a {exc}")
        try:
            check_before_fetch(self._settings, client_id)
            cached = cached_client(client_id, self._documents)
            if cached is not None:
                return cached
            try:
                response = await self._fetch(client_id, address)
            except (FetchDeclined, FetchError) as exc:
                raise fetch_failed(exc) from exc
            return client_from_response(client_id, response, self._documents)
        except CIMDError as exc:
            return exc

    async def registered(self, db: Database, client_id: str) -> Client | None:
        """A registered client from memory, or read in a worker thread (and then cached)."""
        cached = self._clients.get(client_id)
        if cached is not None:
            return cached
        return await run_blocking(
            self._clients.get_or_load, client_id, lambda: _load_client(db, client_id)
        )

    async def load_keys(
        self, client: Client, address: str, *, kid: str | None = None
    ) -> KeySet | InvalidClient | None:
        """The keys at the client's ``jwks_uri`` (cached, else fetched for the requester at
        ``address``; fetched again early when they lack ``kid``, at most once a minute), or
        the error that refuses it; None when the client has inline keys or no ``jwks_uri``
        (:meth:`jwks_for` decides those without the network)."""
        if client.jwks is not None or client.jwks_uri is None:
            return None
        try:
            return await self._keys.get(client.jwks_uri, kid=kid, requester=address)
        except TemporarilyUnavailable as exc:
            declined = exc.__cause__  # the failure itself is logged by the cache
            if isinstance(declined, FetchDeclined):
                return InvalidClient(f"The client's jwks_uri was not fetched: {declined.message}")
            return InvalidClient(KEYS_UNAVAILABLE)

    # In a worker thread: the database and memory, with what was loaded.

    def find(self, db: Database, client_id: str, loaded: Loaded) -> Client | None:
        """The client named ``client_id``; a metadata document URL's client comes from
        ``loaded`` and is stored (AS-08).

        Raises:
            InvalidClient: the URL's document could not be fetched or is not valid
                (``CIMDError``), or the URL cannot be parsed.
            NotLoaded: the URL's document was not loaded before the worker thread started.
        """
        if not is_cimd_client_id(client_id):
            return self._clients.get_or_load(client_id, lambda: _load_client(db, client_id))
        outcome = loaded.documents.get(client_id)
        if outcome is None:
            raise NotLoaded(f"the metadata document of {client_id[:200]!r} was not loaded")
        if isinstance(outcome, InvalidClient):
            raise outcome
        with db.write() as session:
            replace_client(session, outcome)
        return None if outcome.disabled else outcome

    def cached(self, client_id: str) -> Client | None:
        """The registered client from memory only; None if it is not cached (or unknown)."""
        return None if is_cimd_client_id(client_id) else self._clients.get(client_id)

    def forget(self, client_id: str) -> None:
        """Drop a cached client (after this process changed or deleted it)."""
        self._clients.forget(client_id)

    def jwks_for(self, client: Client, loaded: Loaded) -> KeySet:
        """The client's usable public keys by ``kid``: its JWKS registered inline, or loaded
        from its ``jwks_uri``.

        Raises:
            InvalidClient: no keys, or ``jwks_uri`` could not be fetched safely.
        """
        if client.jwks is not None:
            return jwt.key_set(client.jwks)
        if client.jwks_uri is None:
            raise InvalidClient("The client has no registered keys")
        outcome = loaded.key_sets.get(client.jwks_uri)
        if outcome is None:
            outcome = self._keys.peek(client.jwks_uri, fresh_only=True)
        if outcome is None:
            # the client's jwks_uri changed between loading and now: nothing is fetched here
            raise InvalidClient("The client's keys changed during the request; try again")
        if isinstance(outcome, InvalidClient):
            raise outcome
        return outcome
