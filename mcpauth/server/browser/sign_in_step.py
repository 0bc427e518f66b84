"""The sign-in step of an authorization request, pluggable: ``create_app(settings,
sign_in=...)`` takes any :class:`SignInStep`, so an application can bring its own login (a
company SSO page, a header set by an authenticating proxy, a one-time code) the way
node-oidc-provider's interactions allow. The built-in step, :class:`PasswordAndProviders`,
is the sign-in page with local passwords and the upstream providers' buttons.

A step is asked twice at most per visit: :meth:`SignInStep.page` when the person reaches the
sign-in (a GET), :meth:`SignInStep.submit` when a form the step showed is posted back to
``pending.form_action`` (mcpauth has already refused a cross-site post or a stale CSRF token:
the form must carry ``pending.csrf_token`` as ``csrf_token``). Each returns either a response
to show (a page, a redirect) or the :class:`Account` that signed in; mcpauth then starts the
browser session (a new session id), moves the request to it and continues with consent.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from starlette.requests import Request
from starlette.responses import Response

from mcpauth.server.browser import passkey_login
from mcpauth.server.browser.login import LoginOutcome, attempt_login, provider_buttons
from mcpauth.server.browser.pages import render
from mcpauth.server.browser.services import BrowserServices
from mcpauth.server.browser.sessions import BrowserSession

__all__ = ["Account", "PasswordAndProviders", "PendingSignIn", "SignInStep"]


@dataclass(frozen=True)
class Account:
    """Who signed in: an existing account's ``user_id``, or a ``username`` that is found or
    created (with no password: it signs in only through this step)."""

    user_id: str | None = None
    username: str | None = None

    def __post_init__(self) -> None:
        if (self.user_id is None) == (self.username is None):
            raise ValueError("Account needs exactly one of user_id and username")


@dataclass(frozen=True)
class PendingSignIn:
    """The authorization request waiting for a sign-in, as a step sees it."""

    interaction_id: str
    client_name: str  # the application asking, as the consent page shows it
    form_action: str  # where a form of the step posts back (to :meth:`SignInStep.submit`)
    csrf_token: str  # the hidden ``csrf_token`` field such a form must carry
    # what the built-in page needs; a step of your own may ignore them
    context: BrowserServices
    browser: BrowserSession


@runtime_checkable
class SignInStep(Protocol):
    async def page(self, request: Request, pending: PendingSignIn) -> Response | Account:
        """The person reached the sign-in: show a page or say who signed in."""
        ...

    async def submit(self, request: Request, pending: PendingSignIn) -> Response | Account:
        """A form of this step was posted back: show a page or say who signed in."""
        ...


class PasswordAndProviders:
    """The built-in step: username and password (when ``local_accounts`` is on, throttled and
    locked out as docs/security.md T10 and T20 say) and a button per upstream provider."""

    def _page(self, pending: PendingSignIn, outcome: LoginOutcome | None = None) -> Response:
        ctx = pending.context
        outcome = outcome or LoginOutcome()
        passkey = passkey_login.options(ctx, pending.browser, pending.interaction_id)
        return render(
            "login.html",
            outcome.status,
            scripts=passkey is not None,
            passkey_options=passkey,
            passkey_action=ctx.endpoint_url(f"interaction/{pending.interaction_id}/passkey/login"),
            client_name=pending.client_name,
            error=outcome.error,
            username=outcome.username,
            action=pending.form_action,
            csrf_token=pending.csrf_token,
            local_accounts=ctx.settings.local_accounts,
            providers=provider_buttons(ctx, pending.browser, pending.interaction_id),
        )

    async def page(self, request: Request, pending: PendingSignIn) -> Response | Account:
        return self._page(pending)

    async def submit(self, request: Request, pending: PendingSignIn) -> Response | Account:
        ctx = pending.context
        outcome = await attempt_login(
            ctx,
            request,
            pending.browser,
            f"login:{pending.interaction_id}",
            retry_url=ctx.endpoint_url(f"interaction/{pending.interaction_id}"),
        )
        if isinstance(outcome, Response):
            return outcome
        if outcome.error or outcome.user_id is None:
            return self._page(pending, outcome)
        return Account(user_id=outcome.user_id)
