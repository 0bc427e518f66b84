"""The administrative commands behind ``mcpauth users|resources|clients|keys|audit|db`` and the
admin console (``/admin``): each works on the same database as ``serve``, returns the typed
values of :mod:`mcpauth.server.admin_results` (plain JSON objects at run time, as the commands
print them), and every change is audited (an ``admin.*`` event naming the acting
administrator, :data:`acting_admin`, written to the audit trail at once)."""

from __future__ import annotations

import asyncio
import functools
import json
from collections.abc import Callable, Sequence
from contextvars import ContextVar
from typing import Any, Concatenate, ParamSpec, TypeVar, cast

from mcpauth.errors import ConfigurationError, OAuthError
from mcpauth.oauth import format_scope
from mcpauth.server.admin_results import (
    AuditEntry,
    ClientInfo,
    ClientListing,
    KeyInfo,
    KeyState,
    MfaReset,
    ResourceInfo,
    RotatedKey,
    SessionInfo,
    UpstreamInfo,
    UserGrant,
    UserInfo,
    UserListing,
)
from mcpauth.server.authorization.checks import RESERVED_SCOPES
from mcpauth.server.clients import records
from mcpauth.server.clients.validation import validate_client_metadata
from mcpauth.server.config import Settings
from mcpauth.server.context import ServerContext, build_context
from mcpauth.server.operations.logs import log_audit
from mcpauth.server.storage import (
    browser_sessions,
    grant_store,
    identities,
    lookups,
    migrate,
    second_factors,
    upstream_tokens,
)
from mcpauth.server.storage.database import make_engine
from mcpauth.server.storage.models import Resource, User
from mcpauth.server.tokens.issuance import PERSON_CLAIMS
from mcpauth.uris import URIError, canonical_resource

P = ParamSpec("P")
R = TypeVar("R")


# who is acting, named by every admin.* audit event: the console sets the administrator's
# name, the command line "command line"
acting_admin: ContextVar[str] = ContextVar("mcpauth_acting_admin", default="api")


class AdminError(ConfigurationError):
    """An admin command cannot do what was asked; the message says why."""


def _audit(ctx: ServerContext, event: str, **fields: Any) -> None:
    """An administrator's action: its log line and its audit-trail row, written now."""
    fields = {"actor": acting_admin.get(), **fields}
    log_audit(event, **fields)
    ctx.audit_trail.write(event, fields)


def open_context(settings: Settings, *, upgrade: bool = True) -> ServerContext:
    """A context on the configured database, its schema as :func:`migrate.ensure_schema`
    says (an embedded SQLite one upgraded unless ``upgrade`` is false).

    Raises:
        AdminError: the schema is behind and is not upgraded here.
    """
    engine = make_engine(settings.database_url)
    try:
        migrate.ensure_schema(engine, upgrades="embedded" if upgrade else "never")
    except ConfigurationError as exc:
        engine.dispose()
        raise AdminError(str(exc)) from exc
    return build_context(settings, engine)


def add_user(ctx: ServerContext, username: str, password: str, *, admin: bool = False) -> UserInfo:
    """Add a user who signs in with ``password`` (hashed with argon2id); ``admin``: she may
    use the admin console."""
    username = username.strip()
    if not username or len(username) > 200:
        raise AdminError("the username must be 1 to 200 characters")
    if len(password) < 8:
        raise AdminError("the password must be at least 8 characters")
    with ctx.db.write() as session:
        if lookups.user_by_name(session, username) is not None:
            raise AdminError(f"user {username!r} already exists")
        user = lookups.add_user(
            session, username, ctx.passwords.hash(password), ctx.now(), admin=admin
        )
        info: UserInfo = {"id": user.id, "username": user.username}
    _audit(ctx, "admin.user_added", user_id=info["id"], username=info["username"], admin=admin)
    return info


def _listing(user: User) -> UserListing:
    return {
        "id": user.id,
        "username": user.username,
        "created_at": user.created_at,
        "admin": user.is_admin,
        "disabled": user.disabled,
    }


def list_users(ctx: ServerContext) -> list[UserListing]:
    with ctx.db.read() as session:
        return [_listing(u) for u in lookups.list_users(session)]


def _user(session: Any, username: str) -> User:
    user = lookups.user_by_name(session, username)
    if user is None:
        raise AdminError(f"no user {username!r}")
    return user


def remove_user(ctx: ServerContext, username: str) -> None:
    """Remove a user with her grants, sessions, second factors and linked identities."""
    with ctx.db.write() as session:
        user = _user(session, username)
        user_id = user.id
        lookups.remove_user(session, user)
    _audit(ctx, "admin.user_removed", user_id=user_id, username=username)


def set_admin(ctx: ServerContext, username: str, admin: bool) -> UserListing:
    """Make a user an administrator (``admin``: she may use the admin console) or no longer
    one. Audited (``admin.admin_granted``, ``admin.admin_dropped``)."""
    with ctx.db.write() as session:
        user = _user(session, username)
        user.is_admin = admin
        lookups.save_user(session, user)
        listing = _listing(user)
    event = "admin.admin_granted" if admin else "admin.admin_dropped"
    _audit(ctx, event, user_id=listing["id"], username=listing["username"])
    return listing


def disable_user(ctx: ServerContext, username: str, disabled: bool = True) -> UserListing:
    """Disable a user (``disabled``), or enable her again. Disabling signs her out everywhere
    (her sessions count as signed out at once), refuses every sign-in (password, passkey,
    provider) and revokes her grants (their refresh tokens stop working at once); enabling
    lets her sign in again (the grants stay revoked). Audited (``admin.user_disabled``,
    ``admin.user_enabled``)."""
    now = ctx.now()
    with ctx.db.write() as session:
        user = _user(session, username)
        user.disabled = disabled
        lookups.save_user(session, user)
        revoked = 0
        if disabled:
            browser_sessions.end_user(session, user.id)
            for grant in grant_store.user_grants(session, user.id):
                grant_store.revoke_grant(session, grant.id, now)
                grant_store.forget_consent(session, user.id, grant.client_id, grant.resource)
                revoked += 1
        listing = _listing(user)
    event = "admin.user_disabled" if disabled else "admin.user_enabled"
    _audit(ctx, event, user_id=listing["id"], username=username, grants_revoked=revoked)
    return listing


def administrator(ctx: ServerContext, user_id: str) -> str | None:
    """The name of the user ``user_id`` if she exists and is an administrator, else None."""
    with ctx.db.read() as session:
        user = lookups.get_user(session, user_id)
        return user.username if user is not None and user.is_admin else None


def user_grants(ctx: ServerContext, username: str) -> list[UserGrant]:
    """A person's live grants, the most recently used first."""
    with ctx.db.read() as session:
        user = _user(session, username)
        rows: list[UserGrant] = []
        for grant in grant_store.user_grants(session, user.id):
            client = lookups.get_client(session, grant.client_id)
            rows.append(
                {
                    "id": grant.id,
                    "client_id": grant.client_id,
                    "client_name": client.client_name if client else "",
                    "resource": grant.resource,
                    "scope": grant.scope,
                    "created_at": grant.created_at,
                    "last_used_at": grant.last_used_at,
                }
            )
        return rows


def revoke_grants(
    ctx: ServerContext, username: str, *, client_id: str | None = None, grant_id: str | None = None
) -> int:
    """Revoke a person's grants (every one, those of ``client_id`` or the one ``grant_id``):
    their refresh tokens stop working at once and their consents are forgotten, as when she
    revokes an application on her account page; her kept upstream tokens go too. How many were
    revoked. Audited (``admin.grant_revoked``, one event a grant).

    Raises:
        AdminError: no such user, or no live grant matches.
    """
    now = ctx.now()
    with ctx.db.write() as session:
        user = _user(session, username)
        rows = [
            g
            for g in grant_store.user_grants(session, user.id)
            if (client_id is None or g.client_id == client_id)
            and (grant_id is None or g.id == grant_id)
        ]
        if not rows:
            raise AdminError(f"no live grant of {username!r} matches")
        for grant in rows:
            grant_store.revoke_grant(session, grant.id, now)
            grant_store.forget_consent(session, user.id, grant.client_id, grant.resource)
        upstream_tokens.forget(session, user.id)
        user_id = user.id
        revoked = [(grant.client_id, grant.id) for grant in rows]
    for client, grant_id_revoked in revoked:
        _audit(
            ctx,
            "admin.grant_revoked",
            user_id=user_id,
            username=username,
            client_id=client,
            grant_id=grant_id_revoked,
        )
    return len(revoked)


def user_sessions(ctx: ServerContext, username: str) -> list[SessionInfo]:
    """A person's signed-in browser sessions, the newest first."""
    with ctx.db.read() as session:
        user = _user(session, username)
        found = browser_sessions.live_sessions(session, user.id, ctx.now())
    return [{"auth_time": at, "amr": amr, "expires_at": ends} for at, amr, ends in found]


def end_sessions(ctx: ServerContext, username: str) -> int:
    """Sign a person out of every browser (her tokens are left: revoke the grants for those).
    How many sessions ended. Audited (``admin.sessions_ended``)."""
    live = len(user_sessions(ctx, username))
    with ctx.db.write() as session:
        user = _user(session, username)
        browser_sessions.end_user(session, user.id)
        user_id = user.id
    _audit(ctx, "admin.sessions_ended", user_id=user_id, username=username, sessions=live)
    return live


def search_audit(
    ctx: ServerContext,
    *,
    user: str | None = None,
    client: str | None = None,
    event: str | None = None,
    since: int | None = None,
    until: int | None = None,
    limit: int = 100,
) -> list[AuditEntry]:
    """The audit events kept (``audit_retention`` seconds) that match every filter given,
    newest first: ``user`` a user's name or id (also of a user since removed), ``client`` a
    client id, ``event`` an event name (``admin.user_added``) or a prefix ending in a dot
    (``admin.``), ``since`` and ``until`` seconds since the epoch (inclusive)."""
    users = [user] if user else []
    if user:
        with ctx.db.read() as session:
            found = lookups.user_by_name(session, user)
            if found is not None:
                users.append(found.id)
    rows = ctx.audit_trail.search(
        user=users, client=client, event=event, since=since, until=until, limit=limit
    )
    return [cast(AuditEntry, {k: row[k] for k in AuditEntry.__annotations__}) for row in rows]


def reset_mfa(ctx: ServerContext, username: str) -> MfaReset:
    """Remove every second factor of a user (the authenticator app, its recovery codes, the
    passkeys) and end her browser sessions: for a person who lost them; she signs in with her
    password (or provider) alone and sets new ones up. Audited (``admin.mfa_reset``)."""
    with ctx.db.write() as session:
        user = _user(session, username)
        before = second_factors.factors(session, user.id)
        second_factors.forget_user(session, user.id)
        browser_sessions.end_user(session, user.id)
    _audit(
        ctx,
        "admin.mfa_reset",
        user_id=user.id,
        username=user.username,
        totp=before.totp,
        passkeys=before.passkeys,
    )
    return {"username": user.username, "totp": before.totp, "passkeys": before.passkeys}


def _parse_scopes(values: Sequence[str]) -> dict[str, str]:
    scopes: dict[str, str] = {}
    for value in values:
        name, _, description = value.partition("=")
        name = name.strip()
        if not name or " " in name or '"' in name or "\\" in name:
            raise AdminError(f"invalid scope {value!r}")
        if name in RESERVED_SCOPES:
            raise AdminError(f"{name} is a scope of the authorization server, not of a resource")
        scopes[name] = description.strip()
    return scopes


def _token_claims(values: Sequence[str]) -> list[str]:
    """The person claims a resource's tokens carry, in their usual order."""
    unknown = [value for value in values if value not in PERSON_CLAIMS]
    if unknown:
        raise AdminError(f"unknown claim {unknown[0]!r}: choose from {', '.join(PERSON_CLAIMS)}")
    return [claim for claim in PERSON_CLAIMS if claim in values]


def _canonical(uri: str) -> str:
    try:
        return canonical_resource(uri)
    except URIError as exc:
        raise AdminError(str(exc)) from exc


def add_resource(
    ctx: ServerContext,
    uri: str,
    *,
    name: str = "",
    scopes: Sequence[str] = (),
    default_scopes: Sequence[str] = (),
    is_default: bool = False,
    dpop_required: bool = False,
    token_claims: Sequence[str] = (),
    require_mfa: bool = False,
) -> ResourceInfo:
    """Add a protected resource; ``scopes`` are ``name`` or ``name=description``;
    ``require_mfa``: people sign in with a second factor before authorizing a client for it."""
    canonical = _canonical(uri)
    claims = _token_claims(token_claims)
    scope_map = _parse_scopes(scopes)
    unknown = [s for s in default_scopes if s not in scope_map]
    if unknown:
        raise AdminError(f"default scopes not among the resource's scopes: {', '.join(unknown)}")
    row = Resource(
        uri=canonical,
        name=name,
        scopes=scope_map,
        default_scopes=list(default_scopes),
        is_default=is_default,
        dpop_required=dpop_required,
        token_claims=claims,
        require_mfa=require_mfa,
        created_at=ctx.now(),
    )
    with ctx.db.write() as session:
        if lookups.get_resource(session, canonical) is not None:
            raise AdminError(f"resource {canonical} already exists")
        lookups.add_resource(session, row)
    ctx.resources.refresh()
    _audit(ctx, "admin.resource_added", resource=canonical)
    return _resource_info(row)


def _resource_info(resource: Resource) -> ResourceInfo:
    return {
        "uri": resource.uri,
        "name": resource.name,
        "scopes": resource.scopes,
        "default_scopes": resource.default_scopes,
        "default": resource.is_default,
        "dpop_required": resource.dpop_required,
        "token_claims": resource.token_claims,
        "require_mfa": resource.require_mfa,
    }


def list_resources(ctx: ServerContext) -> list[ResourceInfo]:
    with ctx.db.read() as session:
        return [_resource_info(r) for r in lookups.list_resources(session)]


def edit_resource(
    ctx: ServerContext,
    uri: str,
    *,
    require_mfa: bool | None = None,
    scopes: Sequence[str] | None = None,
) -> ResourceInfo:
    """Change a protected resource: ``require_mfa``, and its ``scopes`` (``name`` or
    ``name=description``, replacing them all; its default scopes no longer among them are
    dropped); None leaves each. Grants already made keep their scopes. Audited
    (``admin.resource_changed``)."""
    canonical = _canonical(uri)
    scope_map = _parse_scopes(scopes) if scopes is not None else None
    with ctx.db.write() as session:
        resource = lookups.get_resource(session, canonical)
        if resource is None:
            raise AdminError(f"no resource {canonical}")
        if require_mfa is not None:
            resource.require_mfa = require_mfa
        if scope_map is not None:
            resource.scopes = scope_map
            resource.default_scopes = [s for s in resource.default_scopes if s in scope_map]
        lookups.save_resource(session, resource)
        info = _resource_info(resource)
    ctx.resources.refresh()
    changed = {
        **({} if require_mfa is None else {"require_mfa": require_mfa}),
        **({} if scope_map is None else {"scopes": format_scope(list(scope_map))}),
    }
    _audit(ctx, "admin.resource_changed", resource=canonical, **changed)
    return info


def remove_resource(ctx: ServerContext, uri: str) -> None:
    canonical = _canonical(uri)
    with ctx.db.write() as session:
        resource = lookups.get_resource(session, canonical)
        if resource is None:
            raise AdminError(f"no resource {canonical}")
        lookups.remove_resource(session, resource)
    ctx.resources.refresh()
    _audit(ctx, "admin.resource_removed", resource=canonical)


def add_client(
    ctx: ServerContext,
    *,
    name: str,
    redirect_uris: Sequence[str] = (),
    grant_types: Sequence[str] = (),
    auth_method: str | None = None,
    jwks_uri: str | None = None,
    jwks: dict[str, Any] | None = None,
    scopes: Sequence[str] = (),
    first_party: bool = False,
    introspect: bool = False,
    dpop_bound: bool = False,
    exchange_from: Sequence[str] = (),
    exchange_to: Sequence[str] = (),
) -> ClientInfo:
    """Register a client; the result holds ``client_id`` and, for a confidential client,
    ``client_secret`` (shown once: only its digest is stored)."""
    raw: dict[str, Any] = {"client_name": name, "redirect_uris": list(redirect_uris)}
    if grant_types:
        raw["grant_types"] = list(grant_types)
    elif not redirect_uris:
        raw["grant_types"] = ["client_credentials"]
    if auth_method:
        raw["token_endpoint_auth_method"] = auth_method
    if jwks_uri:
        raw["jwks_uri"] = jwks_uri
    if jwks is not None:
        raw["jwks"] = jwks
    if scopes:
        raw["scope"] = format_scope(scopes)
    if dpop_bound:
        raw["dpop_bound_access_tokens"] = True
    if exchange_from:
        raw["exchange_from"] = list(exchange_from)
    if exchange_to:
        raw["exchange_to"] = list(exchange_to)
    with ctx.db.read() as session:
        known = set(lookups.all_scopes(session)) | RESERVED_SCOPES
    try:
        validated = validate_client_metadata(
            raw, known_scopes=known, auth_methods=records.AUTH_METHODS, admin=True
        )
    except OAuthError as exc:
        raise AdminError(exc.description) from exc
    info = records.create_client(
        ctx, validated, source="admin", first_party=first_party, introspect=introspect
    )
    info.pop("registration_access_token", None)
    _audit(ctx, "admin.client_added", client_id=info["client_id"], client_name=name)
    return cast(ClientInfo, info)


def list_clients(ctx: ServerContext, client_id: str | None = None) -> list[ClientListing]:
    """The registered clients (only the one ``client_id``, if given); never a secret."""
    with ctx.db.read() as session:
        return [
            {
                "client_id": c.client_id,
                "client_name": c.client_name,
                "source": c.source,
                "token_endpoint_auth_method": c.token_endpoint_auth_method,
                "redirect_uris": c.redirect_uris,
                "grant_types": c.grant_types,
                "first_party": c.first_party,
                "introspect": c.introspect,
                "disabled": c.disabled,
            }
            for c in lookups.list_clients(session)
            if client_id is None or c.client_id == client_id
        ]


def remove_client(ctx: ServerContext, client_id: str) -> None:
    with ctx.db.write() as session:
        if not grant_store.delete_client(session, client_id):
            raise AdminError(f"no client {client_id!r}")
    ctx.clients.forget(client_id)
    _audit(ctx, "admin.client_removed", client_id=client_id)


def disable_client(ctx: ServerContext, client_id: str, disabled: bool = True) -> ClientListing:
    """Disable a client (``disabled``), or enable it again: while disabled it is refused at
    every endpoint as an unknown client (``/authorize``, ``/token``, ``/revoke``,
    ``/introspect``), so its refresh tokens stop working, though they and its grants are kept.
    Audited (``admin.client_disabled``, ``admin.client_enabled``).

    Raises:
        AdminError: no such client.
    """
    with ctx.db.write() as session:
        client = lookups.get_client(session, client_id)
        if client is None:
            raise AdminError(f"no client {client_id!r}")
        client.disabled = disabled
        lookups.save_client(session, client)
    ctx.clients.forget(client_id)
    _audit(
        ctx, "admin.client_disabled" if disabled else "admin.client_enabled", client_id=client_id
    )
    return list_clients(ctx, client_id)[0]


def list_keys(ctx: ServerContext) -> list[KeyInfo]:
    now = ctx.now()
    rows: list[KeyInfo] = []
    for key in ctx.keys.list_keys():
        state: KeyState
        if key.expires_at is not None and key.expires_at <= now:
            state = "expired"
        elif key.active_at > now:
            state = "next"
        elif key.retired_at is not None and key.retired_at <= now:
            state = "retired"
        else:
            state = "active"
        rows.append(
            {
                "kid": key.kid,
                "alg": key.alg,
                "state": state,
                "created_at": key.created_at,
                "active_at": key.active_at,
                "retired_at": key.retired_at,
                "expires_at": key.expires_at,
            }
        )
    return rows


def rotate_keys(ctx: ServerContext) -> RotatedKey:
    ctx.keys.ensure_key()
    key = ctx.keys.rotate()
    _audit(ctx, "admin.keys_rotated", kid=key.kid, alg=key.alg, active_at=key.active_at)
    return {"kid": key.kid, "alg": key.alg, "active_at": key.active_at}


def list_upstream(ctx: ServerContext, *, check: bool = False) -> list[UpstreamInfo]:
    """The configured upstream providers (settings, never the database: their secrets
    stay in the environment or files), the redirect URI to register at each, whether its
    secret can be read and how many people have signed in through it; with ``check``, whether
    its OpenID configuration can be fetched now."""
    with ctx.db.read() as session:
        signed_in = identities.identities_by_provider(session)
    rows: list[UpstreamInfo] = []
    for provider in ctx.upstream:
        config = provider.config
        if config.client_secret_env:
            source = f"environment variable {config.client_secret_env}"
        elif config.client_secret_file:
            source = f"file {config.client_secret_file}"
        else:
            source = "none (public client)"
        try:
            provider.secret()
            readable = True
        except ConfigurationError:
            readable = False
        row: dict[str, Any] = {
            "id": config.id,
            "name": config.name,
            "kind": config.kind,
            "issuer": config.issuer,
            "client_id": config.client_id,
            "client_secret": source,
            "client_secret_readable": readable,
            "token_endpoint_auth_method": config.auth_method,
            "scopes": list(config.scopes),
            "allowed_email_domains": list(config.allowed_email_domains),
            "required_claims": {k: list(v) for k, v in config.required_claims.items()},
            "redirect_uri": ctx.endpoint_url(f"upstream/{config.id}/callback"),
            **(
                {}
                if config.is_openid
                else {
                    "authorization_endpoint": config.authorization_endpoint,
                    "token_endpoint": config.token_endpoint,
                    "userinfo_endpoint": config.userinfo_endpoint,
                }
            ),
            "accounts": signed_in.get(config.id, 0),
        }
        if check:
            row["reachable"] = _reachable(ctx, provider)
        rows.append(cast(UpstreamInfo, row))  # built in the order the command prints
    return rows


def _reachable(ctx: ServerContext, provider: Any) -> str:
    from mcpauth.server.identity.upstream import UpstreamUnavailable

    if not provider.config.is_openid:
        return f"not checked: a {provider.config.kind} provider has no discovery document"
    try:
        asyncio.run(ctx.upstream.metadata(provider))
    except UpstreamUnavailable as exc:
        return f"no: {exc.reason}"
    return "yes"


def dump(data: object) -> str:
    return json.dumps(data, indent=2, sort_keys=False)


def _method(
    operation: Callable[Concatenate[ServerContext, P], R],
) -> Callable[Concatenate[Admin, P], R]:
    """``operation`` as a method of :class:`Admin`, on its context: one signature and one
    docstring for each operation, whether called as a function or on an ``Admin``."""

    @functools.wraps(operation)
    def method(admin: Admin, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return operation(admin._ctx, *args, **kwargs)

    return method


class Admin:
    """The administrative API for Python code: the same operations as the ``mcpauth users``,
    ``resources``, ``clients`` and ``keys`` commands, on the database of ``settings``::

        with Admin.open(Settings(issuer="https://auth.example.com")) as admin:
            admin.add_resource("https://mcp.example.com/mcp", scopes=["mcp:tools"])
            admin.add_user("alice", password)

    or on a running application, whose caches then see each change at once::

        admin = Admin.of(app)

    Every method raises :class:`AdminError` with a plain message when it cannot do what
    was asked (a duplicate name, an unknown id, invalid client metadata)."""

    def __init__(self, ctx: ServerContext, *, owns_database: bool = False) -> None:
        self._ctx = ctx
        self._owns_database = owns_database

    @classmethod
    def open(cls, settings: Settings, *, upgrade: bool = True) -> Admin:
        """An admin on ``settings.database_url`` (an embedded SQLite database is created or
        upgraded; another database must already be at the newest schema)."""
        return cls(open_context(settings, upgrade=upgrade), owns_database=True)

    @classmethod
    def of(cls, app: Any) -> Admin:
        """An admin on the database of an application made by ``create_app``."""
        return cls(app.state.mcpauth)

    def close(self) -> None:
        if self._owns_database:
            self._ctx.db.dispose()

    def __enter__(self) -> Admin:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    add_user = _method(add_user)
    list_users = _method(list_users)
    remove_user = _method(remove_user)
    add_resource = _method(add_resource)
    list_resources = _method(list_resources)
    remove_resource = _method(remove_resource)
    edit_resource = _method(edit_resource)
    reset_mfa = _method(reset_mfa)
    set_admin = _method(set_admin)
    disable_user = _method(disable_user)
    administrator = _method(administrator)
    user_grants = _method(user_grants)
    revoke_grants = _method(revoke_grants)
    user_sessions = _method(user_sessions)
    end_sessions = _method(end_sessions)
    search_audit = _method(search_audit)
    add_client = _method(add_client)
    list_clients = _method(list_clients)
    remove_client = _method(remove_client)
    disable_client = _method(disable_client)
    list_keys = _method(list_keys)
    rotate_keys = _method(rotate_keys)
    list_upstream = _method(list_upstream)
