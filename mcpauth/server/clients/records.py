"""Client rows: creation and metadata updates (registration, management, the admin API),
protection of the operator's client names, and the lookup every endpoint uses."""

from __future__ import annotations

import secrets as _random
import unicodedata
from typing import Any
from urllib.parse import quote

from mcpauth import oauth
from mcpauth.errors import InvalidClientMetadata
from mcpauth.server.clients.directory import Loaded
from mcpauth.server.clients.services import ClientServices
from mcpauth.server.clients.validation import ValidatedClient
from mcpauth.server.config import Settings
from mcpauth.server.crypto import digest, new_token
from mcpauth.server.storage.database import Database
from mcpauth.server.storage.lookups import admin_client_names, save_client
from mcpauth.server.storage.models import Client

# Token endpoint client authentication methods this server implements (RFC 8414 order).
AUTH_METHODS = oauth.AUTH_METHODS


MAX_NAME = 80  # characters of a client name shown or compared
# Unicode categories never shown in a name: controls, format characters (bidi overrides,
# zero-width joiners), surrogates, private use and unassigned code points.
_HIDDEN = {"Cc", "Cf", "Cs", "Co", "Cn"}


def clean_name(name: str) -> str:
    """``name`` without hidden characters, its white space collapsed, at most 80 characters."""
    visible = "".join(ch for ch in name if unicodedata.category(ch) not in _HIDDEN)
    return " ".join(visible.split())[:MAX_NAME].strip()


def new_client_id() -> str:
    # Never starts with "https://", so it cannot be mistaken for a CIMD URL (AS-32).
    return _random.token_urlsafe(18)


def _comparable(name: str) -> str:
    return " ".join(clean_name(unicodedata.normalize("NFKC", name)).casefold().split())


def check_name_is_free(db: Database, name: str, *, client_id: str | None = None) -> None:
    """A self-registered client may not take the name of a client the operator registered:
    the consent page would show it as that (often first-party) application. Names compare as
    people read them: NFKC, case-folded, invisible characters dropped, white space collapsed.

    Raises:
        InvalidClientMetadata: an admin-registered client has that name.
    """
    wanted = _comparable(name)
    if not wanted:
        return
    with db.read() as session:
        taken = admin_client_names(session, client_id)
    if any(_comparable(each) == wanted for each in taken):
        raise InvalidClientMetadata(
            "client_name: that name belongs to a client registered by the operator"
        )


def find_client(ctx: ClientServices, client_id: str, loaded: Loaded) -> Client | None:
    """The client named ``client_id``, for every endpoint, in its worker thread: a metadata
    document URL's client is the one ``loaded`` on the event loop before (see
    :meth:`ClientDirectory.load_document`, which also checks that the URL parses).

    Raises:
        InvalidClient: the ``client_id`` URL cannot be parsed, or its document cannot be used.
        NotLoaded: a metadata document URL's client was not loaded.
    """
    return ctx.clients.find(ctx.db, client_id, loaded)


def configuration_uri(settings: Settings, client_id: str) -> str:
    """RFC 7592 client configuration endpoint of one client."""
    return settings.endpoint_url(f"register/{quote(client_id, safe='')}")


def apply_metadata(row: Client, validated: ValidatedClient) -> None:
    """Copy validated metadata onto a stored client (registration and RFC 7592 updates)."""
    row.client_name = validated.client_name
    row.redirect_uris = validated.redirect_uris
    row.grant_types = validated.grant_types
    row.response_types = validated.response_types
    row.token_endpoint_auth_method = validated.token_endpoint_auth_method
    row.application_type = validated.application_type
    row.scope = validated.scope
    row.jwks = validated.jwks
    row.jwks_uri = validated.jwks_uri
    row.client_metadata = validated.document()


def create_client(
    ctx: ClientServices,
    validated: ValidatedClient,
    *,
    source: str,
    first_party: bool = False,
    introspect: bool = False,
) -> dict[str, Any]:
    """Store a new client; return its RFC 7591 §3.2.1 information with the secrets, shown once.
    ``client_secret_expires_at`` is 0 (never) for the operator's clients; for a self-registered
    one, the end of its unused period, when the pruner deletes it unless it obtained a grant
    (``storage.prune.client_expires_at``; an RFC 7592 read gives the current value)."""
    now = ctx.now()
    client_id = new_client_id()
    secret = (
        new_token() if validated.token_endpoint_auth_method.startswith("client_secret") else None
    )
    registration_token = new_token()
    row = Client(
        client_id=client_id,
        secret_digest=digest(secret) if secret else None,
        client_name=validated.client_name,
        redirect_uris=validated.redirect_uris,
        grant_types=validated.grant_types,
        response_types=validated.response_types,
        token_endpoint_auth_method=validated.token_endpoint_auth_method,
        application_type=validated.application_type,
        scope=validated.scope,
        jwks=validated.jwks,
        jwks_uri=validated.jwks_uri,
        client_metadata=validated.document(),
        first_party=first_party,
        introspect=introspect,
        registration_token_digest=digest(registration_token),
        source=source,
        created_at=now,
    )
    with ctx.db.write() as session:
        save_client(session, row)
    info: dict[str, Any] = {"client_id": client_id, "client_id_issued_at": now}
    if secret:
        info["client_secret"] = secret
        unused_until = now + ctx.settings.self_registered_client_unused_ttl
        info["client_secret_expires_at"] = 0 if source == "admin" else unused_until
    info["registration_access_token"] = registration_token
    info["registration_client_uri"] = configuration_uri(ctx.settings, client_id)
    info.update(validated.document())
    return info
