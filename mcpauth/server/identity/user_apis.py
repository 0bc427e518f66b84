"""Who signed in at a plain OAuth 2.0 provider, which sends no ID token: GitHub's user API
(``GET /user``: its stable numeric ``id`` is the subject, never the renamable ``login``) and
emails API (``GET /user/emails``: the primary address and whether GitHub verified it), or
another provider's user API read through the provider's ``claim_mapping``. The answer becomes
claims shaped like an ID token's (``iss`` the configured issuer, ``sub``, ``email``,
``email_verified``, ``name``, ``groups`` (never GitHub's), and the API's own top-level fields
for ``required_claims``), which the provider's policy then judges as for OpenID providers. An
email address is never the identity; one the provider does not call verified counts as
unverified."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from mcpauth.server.config import UpstreamProvider
from mcpauth.server.identity.id_tokens import MAX_SUBJECT_LENGTH
from mcpauth.server.identity.upstream_http import ProfileError, UpstreamUnavailable

if TYPE_CHECKING:
    from authlib.integrations.httpx_client import AsyncOAuth2Client

# GitHub's REST API: its media type and the API version these answers are documented for
GITHUB_HEADERS = {"Accept": "application/vnd.github+json", "X-GitHub-Api-Version": "2022-11-28"}
JSON_HEADERS = {"Accept": "application/json"}
MAX_EMAILS = 100  # one page of /user/emails (per_page=100)
MAX_FIELD = 1000  # a longer string field of the user's answer is not kept for required_claims
_NO_EMAIL_PERMISSION = (401, 403, 404)  # the token may not read emails: no email, not an error


def _unavailable_status(status: int) -> bool:
    return status == 429 or status >= 500


async def _get(
    client: AsyncOAuth2Client, url: str, access_token: str, headers: Mapping[str, str]
) -> tuple[int, object]:
    """The status and (for 200) JSON body of a GET with the person's access token."""
    response = await client.request(
        "GET",
        url,
        withhold_token=True,
        headers={**headers, "Authorization": f"Bearer {access_token}"},
    )
    if response.status_code != 200:
        return response.status_code, None
    try:
        return 200, response.json()
    except ValueError as exc:
        raise ProfileError("user_api_not_json") from exc


async def who(
    client: AsyncOAuth2Client, config: UpstreamProvider, access_token: str
) -> dict[str, Any]:
    """The claims of the person whose ``access_token`` this is, from the provider's user API.

    Raises:
        UpstreamUnavailable: the API answered 429 or 5xx.
        ProfileError: it refused the token or named no usable subject.
        httpx2.HTTPError: it could not be reached, or answered too much.
    """
    github = config.kind == "github"
    url = config.userinfo_endpoint
    assert url is not None  # settings require it for every kind without an ID token
    status, user = await _get(client, url, access_token, GITHUB_HEADERS if github else JSON_HEADERS)
    if _unavailable_status(status):
        raise UpstreamUnavailable(f"user_api_http_{status}")
    if status != 200:
        raise ProfileError(f"user_api_http_{status}")
    if not isinstance(user, dict):
        raise ProfileError("user_api_not_an_object")
    if not github:
        return mapped_claims(config, user)
    status, emails = await _get(
        client, url.rstrip("/") + f"/emails?per_page={MAX_EMAILS}", access_token, GITHUB_HEADERS
    )
    if _unavailable_status(status):
        raise UpstreamUnavailable(f"emails_api_http_{status}")
    return github_claims(config.issuer, user, emails if status == 200 else None)


def subject(value: object) -> str:
    """A provider's user id as a subject: a non-empty printable string of at most 255
    characters, or a (non-boolean) integer written in decimal.

    Raises:
        ProfileError: anything else.
    """
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if (
        isinstance(value, str)
        and 0 < len(value) <= MAX_SUBJECT_LENGTH
        and value.isprintable()
        and value.strip() == value
    ):
        return value
    raise ProfileError("no_subject")


def _fields(user: Mapping[str, Any]) -> dict[str, Any]:
    """The answer's top-level strings and lists of strings (what ``required_claims`` tests)."""
    return {
        key: value
        for key, value in user.items()
        if (isinstance(value, str) and len(value) <= MAX_FIELD)
        or (isinstance(value, list) and all(isinstance(item, str) for item in value))
    }


def _path(document: Mapping[str, Any], path: str) -> object:
    value: object = document
    for part in path.split("."):
        if not isinstance(value, Mapping):
            return None
        value = value.get(part)
    return value


def github_claims(issuer: str, user: Mapping[str, Any], emails: object) -> dict[str, Any]:
    """Claims from GitHub's ``/user`` answer and its ``/user/emails`` list (None when the token
    may not read it): the subject is the numeric ``id``; the email is the primary address, as
    verified as GitHub says, else the public one of the profile, unverified."""
    sub = subject(user.get("id"))
    email: object = user.get("email")
    verified = False
    if isinstance(emails, list):
        primary = next(
            (
                entry
                for entry in emails[:MAX_EMAILS]
                if isinstance(entry, dict)
                and entry.get("primary") is True
                and isinstance(entry.get("email"), str)
            ),
            None,
        )
        if primary is not None:
            email, verified = primary["email"], primary.get("verified") is True
    name = user.get("name") or user.get("login")
    return {
        **_fields(user),
        "iss": issuer,
        "sub": sub,
        "email": email if isinstance(email, str) else None,
        "email_verified": verified,
        "name": name if isinstance(name, str) else None,
    }


def mapped_claims(config: UpstreamProvider, user: Mapping[str, Any]) -> dict[str, Any]:
    """Claims from another provider's user API answer, through its ``claim_mapping``."""
    email = _path(user, config.claim_field("email"))
    name = _path(user, config.claim_field("name"))
    groups = _path(user, config.claim_field("groups"))
    return {
        **_fields(user),
        "iss": config.issuer,
        "sub": subject(_path(user, config.claim_field("subject"))),
        "email": email if isinstance(email, str) else None,
        "email_verified": _path(user, config.claim_field("email_verified")),
        "name": name if isinstance(name, str) else None,
        "groups": groups,  # bounded as an ID token's are (accounts.admit)
    }
