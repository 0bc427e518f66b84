"""People's kept tokens at upstream providers (``keep_tokens``), fresh: the access token as
kept, or, within a margin of its expiry, refreshed at the provider's token endpoint (Authlib)
and sealed again in place. A refresh the provider refuses because the grant is spent or revoked
(``invalid_grant``; GitHub says ``bad_refresh_token``) deletes what was kept — unless another
request or replica rotated the tokens meanwhile, whose tokens are then the answer. Any other
refusal (mcpauth's own client credentials, say) deletes nothing: it is the operator's to fix,
not the person's."""

from __future__ import annotations

import logging
from dataclasses import replace

from mcpauth.server.identity.upstream import (
    Provider,
    UpstreamProviders,
    UpstreamRefused,
    UpstreamUnavailable,
)
from mcpauth.server.storage import upstream_tokens
from mcpauth.server.storage.database import Database
from mcpauth.server.storage.upstream_tokens import UpstreamTokens
from mcpauth.server.threads import wait_on_loop

log = logging.getLogger("mcpauth.upstream")

REFRESH_MARGIN = 30  # seconds: a kept token this close to expiry is refreshed first
GRANT_GONE = frozenset({"invalid_grant", "bad_refresh_token"})


class TokensGone(Exception):
    """Nothing usable is kept for this person at this provider: they must sign in through it
    again. ``reason`` is a short code for logs."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _usable(tokens: UpstreamTokens | None, now: int) -> bool:
    return tokens is not None and (
        tokens.expires_at is None or tokens.expires_at - REFRESH_MARGIN > now
    )


def fresh_tokens(
    db: Database,
    upstream: UpstreamProviders,
    key: bytes,
    user_id: str,
    provider: Provider,
    now: int,
) -> UpstreamTokens:
    """The person's tokens at ``provider`` with an access token that is not about to expire,
    refreshing them when needed (from a worker thread: the refresh runs on the event loop).

    Raises:
        TokensGone: none are kept, or they expired with no refresh token, or the provider
            refused the refresh as spent or revoked (what was kept is then deleted).
        UpstreamUnavailable: the provider is down, slow, refused for another reason or
            answered without a token; what was kept stays.
    """
    with db.read() as session:
        found = upstream_tokens.kept_sealed(session, key, user_id, provider.id)
    if found is None:
        raise TokensGone("none_kept")
    tokens, sealed = found
    if _usable(tokens, now):
        return tokens
    refresh_token = tokens.refresh_token
    if refresh_token is None:
        with db.write() as session:
            upstream_tokens.forget_if_unchanged(session, user_id, provider.id, sealed)
        raise TokensGone("expired")
    try:
        response = wait_on_loop(
            lambda: upstream.refresh(provider, refresh_token), upstream.timeout + 1
        )
    except UpstreamRefused as exc:
        if exc.error not in GRANT_GONE:
            log.warning("upstream %s: refresh refused (%s)", provider.id, exc.error)
            raise UpstreamUnavailable(f"refresh_{exc.error}") from exc
        with db.write() as session:
            if upstream_tokens.forget_if_unchanged(session, user_id, provider.id, sealed):
                newer = None
            else:  # rotated meanwhile by another request: its tokens are good
                newer = upstream_tokens.kept(session, key, user_id, provider.id)
        if newer is not None and _usable(newer, now):
            return newer
        raise TokensGone(f"refresh_{exc.error}") from exc
    except TimeoutError as exc:
        raise UpstreamUnavailable("timeout") from exc
    fresh = UpstreamTokens.from_response(response, now)
    if fresh is None:
        raise UpstreamUnavailable("refresh_without_token")
    if fresh.refresh_token is None:  # RFC 6749 §6: the old one stays valid when not rotated
        fresh = replace(fresh, refresh_token=refresh_token)
    return _store_refreshed(db, key, user_id, provider.id, sealed, fresh, now)


def _store_refreshed(
    db: Database,
    key: bytes,
    user_id: str,
    provider_id: str,
    sealed: str,
    fresh: UpstreamTokens,
    now: int,
) -> UpstreamTokens:
    """Keep refreshed tokens in place of the ones the refresh started from, unless those went
    meanwhile: deleted (the person revoked the application, removed the provider or the
    account: they stay deleted) or rotated by another request (whose tokens are returned)."""
    with db.write() as session:
        if upstream_tokens.replace_if_unchanged(
            session, key, user_id, provider_id, sealed, fresh, now
        ):
            return fresh
        newer = upstream_tokens.kept(session, key, user_id, provider_id)
    if newer is not None and _usable(newer, now):
        return newer
    raise TokensGone("deleted_meanwhile")
