"""The pages and addresses of sign-in through an upstream provider: the redirect URI, the way
back to the page a sign-in started from (a pending authorization's sign-in page, or the account
page, where a signed-in person may also link a provider), and the plain-words pages refusing a
sign-in, which never redirect anywhere but this server's own pages."""

from __future__ import annotations

from dataclasses import dataclass

from starlette.responses import Response

from mcpauth.server.browser.pages import error_page
from mcpauth.server.config import Settings
from mcpauth.server.identity.upstream import Provider

ACCOUNT = "account"  # the target of a sign-in started on the account page
LINK = "link"  # the target of linking a provider to the signed-in account (account page)


@dataclass(frozen=True)
class Refusal:
    """A page refusing the sign-in: its status, title and words, and the reason logged."""

    reason: str
    status: int
    title: str
    message: str
    error: str = "access_denied"  # the code the page shows (for support)


def callback_url(settings: Settings, provider: Provider) -> str:
    """The redirect URI registered at the provider."""
    return settings.endpoint_url(f"upstream/{provider.id}/callback")


def back_to(settings: Settings, target: str | None) -> str | None:
    """The sign-in page to go back to: the pending authorization's, or the account page."""
    if target is None:
        return None
    return settings.endpoint_url(ACCOUNT if target in (ACCOUNT, LINK) else f"interaction/{target}")


def refusal_page(settings: Settings, refusal: Refusal, target: str | None) -> Response:
    back = back_to(settings, target)
    return error_page(
        refusal.error,
        refusal.message
        + ("" if back else " Go back to the application you came from and start again."),
        refusal.status,
        title=refusal.title,
        back_url=back,
        back_label="Back to sign-in",
    )


def unknown_provider() -> Response:
    return error_page(
        "not_found",
        "This sign-in option doesn't exist (any more). Go back and choose another.",
        404,
        title="Sign-in option not found",
    )


def unavailable(provider: Provider, reason: str) -> Refusal:
    slow = reason == "timeout"
    return Refusal(
        f"upstream_{reason}",
        504 if slow else 502,
        f"{provider.name} is not responding" if slow else f"{provider.name} can't be reached",
        f"{provider.name} did not answer in time, so you were not signed in. Try again in a "
        "moment, or sign in another way."
        if slow
        else f"Signing in with {provider.name} is not possible right now. Try again in a "
        "moment, or sign in another way.",
        error="temporarily_unavailable",
    )
