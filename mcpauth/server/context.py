"""The composition root: the one object ``create_app`` builds from the settings (database,
keys, clock, caches, the providers) and hands every request, and the static proof that it is
what each domain package asks for. The domain packages never import this module: each names
the services it needs in its own ``services.py`` (a protocol) and reads them from the request;
only ``app``, ``admin``, ``discovery`` and the command line import it."""

from __future__ import annotations

import ssl
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import cast

from starlette.requests import Request

from mcpauth.caching import wall_clock
from mcpauth.dpop import DPoPNonces
from mcpauth.server.authorization.resources import ResourceCatalog
from mcpauth.server.authorization.services import AuthorizationServices
from mcpauth.server.browser.services import BrowserServices
from mcpauth.server.clients.directory import ClientDirectory
from mcpauth.server.clients.fetch_admission import FetchGate, FetchLimits
from mcpauth.server.clients.services import ClientServices
from mcpauth.server.clients.ssrf import SafeFetcher
from mcpauth.server.config import Settings
from mcpauth.server.crypto import derive_key, resolve_server_secret
from mcpauth.server.identity import trusted_issuers
from mcpauth.server.identity.passwords import Passwords, passwords_at
from mcpauth.server.identity.trusted_issuers import IdentityProviders, KeySets, is_inline, url_host
from mcpauth.server.identity.upstream import UpstreamProviders
from mcpauth.server.operations.audit_trail import AuditTrail
from mcpauth.server.operations.lockout import Lockouts
from mcpauth.server.outbound import Outbound, outbound_for
from mcpauth.server.storage.database import Database, Engine, sqlite_file
from mcpauth.server.tokens.keys import KeyManager
from mcpauth.server.tokens.services import TokenServices


@dataclass
class ServerContext:
    settings: Settings
    db: Database
    keys: KeyManager
    clock: Callable[[], float]
    cookie_secret: bytes
    idps: IdentityProviders
    workload_keys: IdentityProviders  # the keys of the workload platforms' token issuers
    key_sets: KeySets  # the one key cache both of them read
    clients: ClientDirectory
    upstream: UpstreamProviders
    passwords: Passwords  # argon2id at the settings' cost
    resources: ResourceCatalog = field(init=False)
    lockouts: Lockouts = field(init=False)
    audit_trail: AuditTrail = field(init=False)  # the audit events kept for searching
    dpop_nonces: DPoPNonces | None = None  # when proofs at the token endpoint need one
    upstream_token_key: bytes = b""  # seals people's kept upstream tokens
    second_factor_key: bytes = b""  # seals people's TOTP secrets

    def __post_init__(self) -> None:
        self.resources = ResourceCatalog(self.db)
        self.lockouts = Lockouts(self.db)
        self.audit_trail = AuditTrail(self.db, self.clock)

    def now(self) -> int:
        return int(self.clock())

    def endpoint_url(self, name: str) -> str:
        return self.settings.endpoint_url(name)


def get_context(request: Request) -> ServerContext:
    return cast(ServerContext, request.app.state.mcpauth)


def _conforms(ctx: ServerContext) -> None:
    """Never called, only type-checked: ``ctx`` is what each domain package asks for (its
    ``services.py``), so ``mypy`` fails here when the context lacks or mistypes a member one
    of them names, rather than a request failing with an ``AttributeError``."""
    clients: ClientServices = ctx
    browser: BrowserServices = ctx
    authorization: AuthorizationServices = ctx
    tokens: TokenServices = ctx
    del clients, browser, authorization, tokens


def trusted_key_sets(settings: Settings, outbound: Outbound) -> KeySets:
    """The one key-set cache of the issuers trusted for assertions (``trusted_idps`` and the
    workload rules), fetching through a gate of its own in front of the SSRF-safe fetcher on
    the server's outbound route: https only, no redirects, one deadline, a body cap. The
    configured hosts are allowed even at internal addresses (the operator chose them; no other
    host is fetched with it). The cache backs off after a failure, so the gate remembers none:
    it shares fetches and applies its caps.

    Raises:
        ConfigurationError: a key source is neither an inline JWKS nor an https URL.
    """
    sources = [*settings.trusted_idps.values(), *(w.jwks for w in settings.workloads)]
    fetcher = SafeFetcher(
        allow_hosts={url_host(source) for source in sources if not is_inline(source)},
        timeout=trusted_issuers.FETCH_TIMEOUT,
        max_bytes=trusted_issuers.MAX_BYTES,
        ssl_context=outbound.trust,
        proxy=outbound.proxy,
    )
    return KeySets(sources, FetchGate(fetcher, FetchLimits(failure_ttl=0.0)))


def build_context(
    settings: Settings,
    engine: Engine,
    *,
    clock: Callable[[], float] = wall_clock,
    ssl_context: ssl.SSLContext | None = None,
) -> ServerContext:
    """Everything an endpoint or admin command needs, on ``engine``.

    Raises:
        ConfigurationError: no usable server secret; a trusted issuer's keys are neither an
            inline JWKS nor an https URL.
    """
    secret = resolve_server_secret(settings.secret_key, sqlite_file(settings.database_url))
    # one route (proxy, trust store) for every fetch: documents, key sets, upstream providers
    outbound = outbound_for(settings, ssl_context=ssl_context)
    db = Database(engine)
    keys = KeyManager(
        db,
        secret=secret,
        alg=settings.signing_alg,
        access_token_ttl=settings.access_token_ttl,
        rotation_delay=settings.key_rotation_delay,
        clock=clock,
        reload_interval=settings.key_reload_interval,
    )
    key_sets = trusted_key_sets(settings, outbound)
    return ServerContext(
        settings=settings,
        db=db,
        keys=keys,
        clock=clock,
        # bound to the issuer: issuers sharing a secret reject each other's cookies
        cookie_secret=derive_key(secret, f"mcpauth cookies {settings.issuer}"),
        idps=IdentityProviders(settings.trusted_idps, key_sets),
        workload_keys=IdentityProviders({w.issuer: w.jwks for w in settings.workloads}, key_sets),
        key_sets=key_sets,
        clients=ClientDirectory(settings, outbound=outbound),
        upstream=UpstreamProviders(
            settings.upstream,
            key=derive_key(secret, f"mcpauth upstream sign-in {settings.issuer}"),
            timeout=settings.upstream_timeout,
            outbound=outbound,
            clock=clock,
        ),
        passwords=passwords_at(
            settings.password_hash_time_cost, settings.password_hash_memory_cost
        ),
        upstream_token_key=derive_key(secret, f"mcpauth upstream tokens {settings.issuer}"),
        second_factor_key=derive_key(secret, f"mcpauth totp secrets {settings.issuer}"),
        dpop_nonces=(
            DPoPNonces(derive_key(secret, f"mcpauth dpop nonces {settings.issuer}"))
            if settings.dpop_nonce
            else None
        ),
    )
