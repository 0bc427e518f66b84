"""HTML pages (Jinja2) for people: the service's branding on every page, and the headers every
interaction page carries (no framing, RFC 9700 §4.16; no caching; no referrer to other sites;
a Content-Security-Policy that allows no script at all, except this server's passkey script on
the pages that offer passkeys)."""

from __future__ import annotations

from collections.abc import Iterable
from contextvars import ContextVar
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from starlette.responses import HTMLResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

if TYPE_CHECKING:
    from jinja2 import Environment

_HEADERS = {
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
    "Pragma": "no-cache",
    # Under same-origin the browser sends the real Origin on the pages' own form POSTs (see
    # mcpauth.server.browser.csrf) and no referrer at all to other sites.
    "Referrer-Policy": "same-origin",
    "X-Content-Type-Options": "nosniff",
}

# The pages' colours, light and dark (the CSS custom properties of base.html). WCAG 2.2 AA:
# text and muted text >= 4.5:1 on the page and the card, field borders and focus rings
# >= 3:1 on the card (tests/server/test_pages_palette.py checks every pair).
PALETTE: dict[str, dict[str, str]] = {
    "light": {
        "page": "#f3f4f6",
        "card": "#ffffff",
        "text": "#111827",
        "muted": "#4b5563",
        "line": "#d1d5db",
        "field": "#6b7280",
        "focus": "#1d4ed8",
        "new": "#fef3c7",
        "new-line": "#b45309",
        "warn-line": "#b45309",
        "error-line": "#b91c1c",
        "ok-line": "#15803d",
    },
    "dark": {
        "page": "#030712",
        "card": "#111827",
        "text": "#f9fafb",
        "muted": "#c4c9d2",
        "line": "#374151",
        "field": "#9ca3af",
        "focus": "#93c5fd",
        "new": "#3b2a06",
        "new-line": "#f59e0b",
        "warn-line": "#f59e0b",
        "error-line": "#f87171",
        "ok-line": "#4ade80",
    },
}


def content_security_policy(img_origins: Iterable[str] = (), *, scripts: bool = False) -> str:
    """The pages' policy: no script at all, or with ``scripts`` this server's own script files
    (the passkey pages' ``passkeys.js``; never an inline script)."""
    images = " ".join(["'self'", *sorted(set(img_origins))])
    script = "script-src 'self'; " if scripts else ""
    return (
        f"default-src 'none'; {script}style-src 'unsafe-inline'; img-src {images}; "
        # no form-action: browsers apply it to the redirect after a form POST, which goes to
        # the client's redirect URI
        "frame-ancestors 'none'; base-uri 'none'"
    )


SECURITY_HEADERS = {"Content-Security-Policy": content_security_policy(), **_HEADERS}


def _luminance(colour: str) -> float:
    """WCAG 2.2 relative luminance of ``#rrggbb``."""

    def channel(hex_pair: str) -> float:
        value = int(hex_pair, 16) / 255
        return value / 12.92 if value <= 0.04045 else ((value + 0.055) / 1.055) ** 2.4

    red, green, blue = (channel(colour[i : i + 2]) for i in (1, 3, 5))
    return 0.2126 * red + 0.7152 * green + 0.0722 * blue


def contrast(first: str, second: str) -> float:
    """WCAG 2.2 contrast ratio of two ``#rrggbb`` colours (1 to 21)."""
    light, dark = sorted((_luminance(first), _luminance(second)), reverse=True)
    return (light + 0.05) / (dark + 0.05)


@dataclass(frozen=True)
class Brand:
    """What every page shows of the service: its name, logo, accent colour and issuer."""

    service_name: str = "mcpauth"
    issuer: str = ""
    logo_url: str | None = None
    accent: str = "#2f5bd3"
    favicon_url: str = "/favicon.svg"
    script_url: str = "/passkeys.js"

    @property
    def on_accent(self) -> str:
        """Text colour on the accent (white or near-black, whichever contrasts more)."""
        return (
            "#ffffff"
            if contrast(self.accent, "#ffffff") >= contrast(self.accent, "#111827")
            else "#111827"
        )

    @property
    def issuer_host(self) -> str:
        return urlsplit(self.issuer).netloc

    @property
    def img_origins(self) -> tuple[str, ...]:
        if self.logo_url and self.logo_url.startswith("https://"):
            parts = urlsplit(self.logo_url)
            return (f"https://{parts.netloc}",)
        return ()


# Brand is a frozen dataclass: sharing the default instance is safe
brand_var: ContextVar[Brand] = ContextVar("mcpauth_brand", default=Brand())  # noqa: B039


class BrandMiddleware:
    """Makes the app's :class:`Brand` the one its pages render with."""

    def __init__(self, app: ASGIApp, *, brand: Brand) -> None:
        self.app = app
        self.brand = brand

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        token = brand_var.set(self.brand)
        try:
            await self.app(scope, receive, send)
        finally:
            brand_var.reset(token)


@cache
def environment() -> Environment:
    """The templates' environment, made when a first page is rendered (a server that only
    issues tokens never loads Jinja2)."""
    from jinja2 import Environment, PackageLoader, select_autoescape

    return Environment(
        loader=PackageLoader("mcpauth.server.browser", "templates"),
        autoescape=select_autoescape(default=True),
        auto_reload=False,
    )


def render(
    template: str,
    status_code: int = 200,
    *,
    img_origins: Iterable[str] = (),
    scripts: bool = False,
    **context: Any,
) -> HTMLResponse:
    """A page with the security headers; ``img_origins`` are the https origins its images
    may come from besides this server (the service logo's is always allowed); ``scripts``
    loads the passkey script (and lets it run)."""
    brand = brand_var.get()
    body = (
        environment()
        .get_template(template)
        .render(brand=brand, palette=PALETTE, scripts=scripts, **context)
    )
    policy = content_security_policy([*brand.img_origins, *img_origins], scripts=scripts)
    headers = {"Content-Security-Policy": policy, **_HEADERS}
    return HTMLResponse(body, status_code=status_code, headers=headers)


_TITLES = {
    "access_denied": "Access was not granted",
    "invalid_client": "This application is not recognised",
    "invalid_client_metadata": "This application is set up in a way this server can't accept",
    "invalid_request": "This request can't be completed",
    "invalid_scope": "The application asked for permissions it may not have",
    "invalid_target": "The application asked for a service this server doesn't protect",
    "unauthorized_client": "This application may not do that",
    "unsupported_response_type": "This application sent a request this server doesn't support",
    "server_error": "Something went wrong on our side",
    "temporarily_unavailable": "The service is busy",
    "too_many_requests": "Too many attempts",
    "not_found": "Page not found",
    "cross_site": "This form came from another website",
    "expired": "This page has expired",
}


def error_page(
    error: str,
    description: str,
    status_code: int = 400,
    *,
    continue_url: str | None = None,
    continue_host: str | None = None,
    back_url: str | None = None,
    back_label: str = "Start again",
    title: str | None = None,
) -> HTMLResponse:
    """The page for errors that must not (or need not) be redirected to the client: a title
    in plain words, the description, the error code for support, and the way back."""
    return render(
        "error.html",
        status_code,
        title=title or _TITLES.get(error, "This request can't be completed"),
        error=error,
        description=description,
        continue_url=continue_url,
        continue_host=continue_host,
        back_url=back_url,
        back_label=back_label,
    )


@cache
def _script_text() -> bytes:
    from importlib.resources import files

    return files("mcpauth.server.browser").joinpath("static/passkeys.js").read_bytes()


def passkey_script() -> Response:
    """The pages' one script: the passkey ceremonies (``static/passkeys.js``)."""
    return Response(
        _script_text(),
        media_type="text/javascript",
        headers={"Cache-Control": "public, max-age=3600", "X-Content-Type-Options": "nosniff"},
    )


def favicon(brand: Brand) -> Response:
    """The service's icon: a key on the accent colour."""
    svg = (
        '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 32 32">'
        f'<rect width="32" height="32" rx="7" fill="{brand.accent}"/>'
        f'<g fill="none" stroke="{brand.on_accent}" stroke-width="3" stroke-linecap="round">'
        '<circle cx="12" cy="13" r="5"/><path d="M15.5 16.5 24 25M20 21l3-3"/></g></svg>'
    )
    return Response(
        svg,
        media_type="image/svg+xml",
        headers={"Cache-Control": "public, max-age=86400", "X-Content-Type-Options": "nosniff"},
    )
