"""How the MCP clients people run register, authorize, authenticate and refresh, one profile a
client, as read from each client's own source where it is open (the SDKs, VS Code, Codex,
Gemini CLI, Goose, opencode, Zed, Cline, mcp-remote, the Inspector, LibreChat, Continue) and from
requests quoted in public issue threads for the closed ones (claude.ai, Claude Code, ChatGPT,
Cursor, Windsurf). docs/clients.md is the table these profiles prove.

Sentinels stand for what a client derives at run time:
- ``AS_ALL``: every scope of the authorization server's ``scopes_supported``;
- ``PRM``: the scopes of the resource's protected-resource metadata (``mcp:tools`` here);
- ``HREF``: the resource URL as WHATWG ``new URL(x).href`` writes it (``/`` after an origin).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

AS_ALL = "<as-all>"
PRM = "mcp:tools"
RESOURCE = "http://127.0.0.1:8000/mcp"  # the MCP server, its PRM `resource` verbatim
ORIGIN_RESOURCE = "http://127.0.0.1:8100"  # an MCP server served at an origin's root

CODE = ["authorization_code", "refresh_token"]


@dataclass(frozen=True)
class Refresh:
    """One refresh request of a client's pattern."""

    scope: str | None = None  # a `scope` sent on refresh (rmcp, Gemini, LibreChat)
    resource: str | Literal["same"] | None = "same"  # None: left out (Codex, LibreChat)
    parallel: int = 1  # the same refresh token sent this many times at once
    retried: bool = False  # the response is lost: the same refresh token is sent again
    other_address: bool = False  # from a second egress address (claude.ai)


@dataclass(frozen=True)
class Profile:
    name: str
    # how it registers: a dynamic registration body (sent `registrations` times, the last
    # one used), or None for a client the operator registered (`static` options)
    registration: dict[str, Any] | None
    redirect_uri: str  # the one sent to /authorize (a loopback port may differ)
    scope: str | None  # as sent to /authorize (None: left out)
    resource: str | None  # as sent to /authorize
    token_resource: str | Literal["same"] | None = "same"  # on the code exchange
    token_auth: Literal["none", "basic", "post", "basic+client_id"] = "none"
    refreshes: tuple[Refresh, ...] = (Refresh(),)
    registrations: int = 1
    state: str | None = "af0ifjsldkj"
    static: dict[str, Any] = field(default_factory=dict)
    expected_resource: str = RESOURCE
    notes: str = ""


def dcr(name: str, redirect_uris: list[str], **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "client_name": name,
        "redirect_uris": redirect_uris,
        "grant_types": CODE,
        "response_types": ["code"],
        "token_endpoint_auth_method": "none",
    }
    body.update(extra)
    return {k: v for k, v in body.items() if v is not None}


PROFILES: list[Profile] = [
    Profile(
        "claude.ai",
        dcr(
            "Claude",
            ["https://claude.ai/api/mcp/auth_callback"],
            token_endpoint_auth_method="client_secret_post",
        ),
        redirect_uri="https://claude.ai/api/mcp/auth_callback",
        scope="claudeai",
        resource=RESOURCE,
        token_auth="post",
        registrations=2,
        refreshes=(Refresh(parallel=2, other_address=True), Refresh()),
        notes="registers twice per connect; refreshes from two egress addresses at once",
    ),
    Profile(
        "claude.ai (read write)",
        dcr(
            "Claude",
            ["https://claude.ai/api/mcp/auth_callback"],
            token_endpoint_auth_method="client_secret_post",
        ),
        redirect_uri="https://claude.ai/api/mcp/auth_callback",
        scope="read write",
        resource=RESOURCE,
        token_auth="post",
    ),
    Profile(
        "Claude Code",
        dcr(
            "Claude Code (files-server)",
            ["http://localhost:54212/callback"],
            application_type=None,
        ),
        redirect_uri="http://localhost:54212/callback",
        scope=f"{PRM} offline_access",
        resource=RESOURCE,
        refreshes=(Refresh(parallel=2), Refresh(retried=True)),
        notes="sessions share one refresh token and refresh at once; no `scope` on refresh",
    ),
    Profile(
        "ChatGPT",
        dcr("ChatGPT", ["https://chatgpt.com/connector_platform_oauth_redirect"]),
        redirect_uri="https://chatgpt.com/connector_platform_oauth_redirect",
        scope=AS_ALL,
        resource=RESOURCE,
    ),
    Profile(
        "Cursor",
        dcr(
            "Cursor",
            [
                "http://localhost:8787/callback",
                "https://www.cursor.com/agents/mcp/oauth/callback",
                "cursor://anysphere.cursor-mcp/oauth/callback",
            ],
            application_type="web",
        ),
        redirect_uri="cursor://anysphere.cursor-mcp/oauth/callback",
        scope=AS_ALL,
        resource=RESOURCE,
        notes="three redirect URIs of three kinds in one registration",
    ),
    Profile(
        "Cursor (no application_type, loopback)",
        dcr(
            "Cursor",
            [
                "http://localhost:8787/callback",
                "https://www.cursor.com/agents/mcp/oauth/callback",
                "cursor://anysphere.cursor-mcp/oauth/callback",
            ],
        ),
        redirect_uri="http://localhost:8787/callback",
        scope=AS_ALL,
        resource=RESOURCE,
    ),
    Profile(
        "VS Code",
        dcr(
            "Visual Studio Code",
            [
                "http://127.0.0.1:33418/",
                "http://127.0.0.1/",
                "https://vscode.dev/redirect",
                "https://insiders.vscode.dev/redirect",
            ],
            application_type="native",
            scope=PRM,
        ),
        redirect_uri="http://127.0.0.1:51007/",  # 33418 was taken: any port
        scope=AS_ALL,
        resource=RESOURCE,
        state="vscode://vscode.github-authentication/did-authenticate?nonce=Q1+/w==&windowId=1",
        notes="`state` is a vscode:// URI with `+/=` in it, echoed byte for byte",
    ),
    Profile(
        "VS Code (before 1.104: no resource on the token request)",
        dcr("Visual Studio Code", ["http://127.0.0.1:33418/"], application_type="native"),
        redirect_uri="http://127.0.0.1:33418/",
        scope=PRM,
        resource=RESOURCE,
        token_resource=None,
        refreshes=(Refresh(resource=None),),
    ),
    Profile(
        "Windsurf",
        dcr("Windsurf", ["http://127.0.0.1:29170/callback"]),
        redirect_uri="http://127.0.0.1:29170/callback",
        scope="openid email profile",
        resource=RESOURCE,
    ),
    Profile(
        "Codex CLI",
        dcr("Codex", ["http://127.0.0.1:44123/callback/k2J9dQ1xZ0aB"], application_type="native"),
        redirect_uri="http://127.0.0.1:44123/callback/k2J9dQ1xZ0aB",
        scope=None,
        resource=RESOURCE,
        refreshes=(Refresh(resource=None),),
        notes="no `resource` on refresh",
    ),
    Profile(
        "Gemini CLI",
        dcr("Gemini CLI MCP Client", ["http://localhost:7777/oauth/callback"], scope=""),
        redirect_uri="http://localhost:41999/oauth/callback",
        scope=AS_ALL,
        resource=RESOURCE,
        refreshes=(Refresh(scope=AS_ALL),),
        notes='`scope: ""` at registration; every scope of the AS; `scope` on refresh',
    ),
    Profile(
        "Goose",
        dcr("goose", ["http://127.0.0.1:38111/oauth_callback"]),
        redirect_uri="http://127.0.0.1:38111/oauth_callback",
        scope=f"{AS_ALL} offline_access",
        resource=RESOURCE,
        refreshes=(Refresh(scope=f"{AS_ALL} offline_access"), Refresh(retried=True)),
        notes="refreshes at every start, with `scope`",
    ),
    Profile(
        "opencode",
        dcr("OpenCode", ["http://127.0.0.1:19876/mcp/oauth/callback"], application_type=None),
        redirect_uri="http://127.0.0.1:19876/mcp/oauth/callback",
        scope=PRM,
        resource=RESOURCE,
        refreshes=(Refresh(parallel=2),),
    ),
    Profile(
        "Zed",
        dcr("Zed", ["http://127.0.0.1:40555/callback"]),
        redirect_uri="http://127.0.0.1:40555/callback",
        scope=PRM,
        resource=ORIGIN_RESOURCE,  # the trailing `/` of the PRM's `resource` stripped
        expected_resource=ORIGIN_RESOURCE + "/",
        registrations=2,
        notes="registers on every flow; strips the trailing `/` of `resource`",
    ),
    Profile(
        "Cline 3.x",
        dcr("Cline", ["vscode://saoudrizwan.claude-dev/mcp-auth/callback/8f2c41d0"]),
        redirect_uri="vscode://saoudrizwan.claude-dev/mcp-auth/callback/8f2c41d0",
        scope=PRM,
        resource=RESOURCE,
    ),
    Profile(
        "Cline 4.x",
        dcr("Cline", ["http://127.0.0.1:1456/mcp/oauth/callback"]),
        redirect_uri="http://127.0.0.1:1458/mcp/oauth/callback",
        scope=PRM,
        resource=RESOURCE,
    ),
    Profile(
        "mcp-remote",
        dcr(
            "MCP CLI Proxy",
            ["http://localhost:16392/oauth/callback"],
            software_id="2e6dc280-f3c3-4e01-99a7-8181dbd1d23d",
            software_version="0.15.1",
        ),
        redirect_uri="http://localhost:16392/oauth/callback",
        scope=f"openid email profile offline_access {PRM}",
        resource=RESOURCE,
        refreshes=(Refresh(parallel=2),),
        notes="its last scope fallback; processes share the token file",
    ),
    Profile(
        "MCP Inspector 2.x",
        dcr("MCP Inspector", ["http://localhost:6274/oauth/callback"], scope=""),
        redirect_uri="http://localhost:6274/oauth/callback",
        scope=PRM,
        resource=RESOURCE,
    ),
    Profile(
        "TypeScript SDK 1.x",
        dcr("An MCP client", ["http://localhost:3131/callback"]),
        redirect_uri="http://localhost:3131/callback",
        scope=PRM,
        resource=ORIGIN_RESOURCE + "/",  # href adds `/` to an origin
        expected_resource=ORIGIN_RESOURCE + "/",
    ),
    Profile(
        "TypeScript SDK 2.x (secret issued: Basic)",
        dcr(
            "An MCP client",
            ["http://127.0.0.1:3132/callback"],
            application_type="native",
            token_endpoint_auth_method="client_secret_basic",
        ),
        redirect_uri="http://127.0.0.1:3132/callback",
        scope=f"{PRM} offline_access",
        resource=RESOURCE,
        token_auth="basic",
    ),
    Profile(
        "Python SDK 1.22 (client_secret_post)",
        dcr(
            "An MCP client",
            ["http://localhost:3030/callback"],
            token_endpoint_auth_method="client_secret_post",
        ),
        redirect_uri="http://localhost:3030/callback",
        scope=AS_ALL,
        resource=RESOURCE,
        token_auth="post",
    ),
    Profile(
        "Python SDK 1.23+ (no auth method: Basic and client_id)",
        dcr("An MCP client", ["http://localhost:3030/callback"], token_endpoint_auth_method=None),
        redirect_uri="http://localhost:3030/callback",
        scope=AS_ALL,
        resource=RESOURCE,
        token_auth="basic+client_id",
        notes="omits the method (RFC 7591: client_secret_basic); Basic plus `client_id` in body",
    ),
    Profile(
        "LibreChat",
        dcr(
            "LibreChat MCP Client",
            ["https://chat.example.com/api/mcp/files/oauth/callback"],
            token_endpoint_auth_method="client_secret_basic",
            response_types=["code"],
            scope=PRM,
        ),
        redirect_uri="https://chat.example.com/api/mcp/files/oauth/callback",
        scope=AS_ALL,
        resource=RESOURCE,
        token_auth="basic",
        refreshes=(Refresh(resource=None, scope=PRM),),
        notes="no `resource` on refresh; the registration's `scope` sent on refresh",
    ),
    Profile(
        "Continue",
        dcr("Continue", ["http://localhost:3000/callback"]),
        redirect_uri="http://localhost:3000/callback",
        scope=PRM,
        resource=RESOURCE,
        state=None,
        notes="no `state` (PKCE protects the flow)",
    ),
    Profile(
        "claude.ai (operator-registered client)",
        None,
        redirect_uri="https://claude.ai/api/mcp/auth_callback",
        scope=PRM,
        resource=RESOURCE,
        token_auth="post",
        static={"auth_method": "client_secret_basic"},
        notes="always posts the secret in the body, whatever was registered",
    ),
]
