"""HTML pages (Jinja2) with the headers every interaction page carries: no framing
(RFC 9700 §4.16), no caching, no referrer to other sites."""

from __future__ import annotations

from functools import cache
from typing import Any

from jinja2 import Environment, PackageLoader, select_autoescape
from starlette.responses import HTMLResponse

SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; style-src 'unsafe-inline'; img-src 'self'; "
        "frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
    "Pragma": "no-cache",
    "Referrer-Policy": "same-origin",  # the forms' Origin: see mcpauth.server.csrf
    "X-Content-Type-Options": "nosniff",
}


@cache
def environment() -> Environment:
    return Environment(
        loader=PackageLoader("mcpauth.server", "templates"),
        autoescape=select_autoescape(default=True),
        auto_reload=False,
    )


def render(template: str, status_code: int = 200, **context: Any) -> HTMLResponse:
    body = environment().get_template(template).render(**context)
    return HTMLResponse(body, status_code=status_code, headers=SECURITY_HEADERS)


def error_page(
    error: str,
    description: str,
    status_code: int = 400,
    *,
    continue_url: str | None = None,
    continue_host: str | None = None,
) -> HTMLResponse:
    """The page for errors that must not (or need not) be redirected to the client."""
    return render(
        "error.html",
        status_code,
        error=error,
        description=description,
        continue_url=continue_url,
        continue_host=continue_host,
    )
