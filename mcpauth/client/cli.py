"""``mcpauth login | token | logout``: the client helper on the command line.

Progress goes to stderr; ``token`` prints only the access token on stdout. With ``--dpop`` the
tokens are bound to a DPoP key kept in the store (RFC 9449), and ``token --dpop`` prints the two
header lines one request needs instead, ``Authorization: DPoP ...`` and ``DPoP: <proof>`` for
``--method`` and ``--url`` (and ``--nonce``, the resource's ``DPoP-Nonce`` when it asked for
one); a proof is good for one request: call it again for the next. A script reads the lines
into an array: ``mapfile -t h < <(mcpauth token URL --dpop); curl -H "${h[0]}" -H "${h[1]}"``.
A workload on a platform that issues it a token (``--workload-token-file``,
``--workload-token-env``) gets its tokens with the jwt-bearer grant, without a secret. With
``--device`` (RFC 8628) nothing is opened here: the URL and the code go to stderr, the person
types the code on any device, and the command polls until they decide. Exit
codes:
0 success, 1 the token endpoint or server refused, 3 login required, 4 authorization failed or
was denied, 5 discovery or registration failed, 6 network error.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

EXIT_OK = 0
EXIT_REFUSED = 1
EXIT_LOGIN_REQUIRED = 3
EXIT_AUTHORIZATION_FAILED = 4
EXIT_DISCOVERY_FAILED = 5
EXIT_NETWORK = 6


def _client_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("url", help="the MCP server URL")
    parser.add_argument("--store", metavar="FILE", help="token file (MCPAUTH_CLIENT_STORE)")
    parser.add_argument("--client-id", help="a pre-registered client ID")
    parser.add_argument(
        "--client-secret-env",
        metavar="VAR",
        help="environment variable holding the client secret (never pass secrets as arguments)",
    )
    parser.add_argument("--client-metadata-url", metavar="URL", help="a CIMD client ID URL")
    grants = parser.add_mutually_exclusive_group()
    grants.add_argument(
        "--device",
        action="store_true",
        help="device flow (RFC 8628): print a URL and a code to approve on any device, then wait",
    )
    grants.add_argument(
        "--client-credentials",
        action="store_true",
        help="machine to machine: use the client_credentials grant (needs --client-id and secret)",
    )
    grants.add_argument(
        "--workload-token-file",
        metavar="FILE",
        help="workload identity: the platform's token in FILE is the jwt-bearer assertion",
    )
    grants.add_argument(
        "--workload-token-env",
        metavar="VAR",
        help="workload identity: the platform's token in environment variable VAR",
    )
    parser.add_argument(
        "--dpop",
        action="store_true",
        help="bind the tokens to a DPoP key kept in the store (RFC 9449)",
    )
    compat = parser.add_argument_group(
        "authorization servers that depart from MCP (docs/upstream-providers.md)"
    )
    compat.add_argument(
        "--entra-id",
        metavar="APP_ID_URI",
        help="Microsoft Entra ID v2.0: no resource, scopes as APP_ID_URI/<scope>, S256 assumed",
    )
    compat.add_argument("--no-resource", action="store_true", help="send no RFC 8707 resource")
    compat.add_argument("--resource", metavar="URI", help="send URI as resource instead")
    compat.add_argument(
        "--map-scope",
        action="append",
        default=[],
        metavar="MCP=SERVER",
        help="ask the server for SERVER where the MCP server names MCP (repeat)",
    )
    compat.add_argument("--scope-prefix", default="", help="put before every non-OpenID scope")
    compat.add_argument(
        "--assume-pkce-s256",
        action="store_true",
        help="use PKCE S256 though the server's metadata does not list it",
    )


def add_client_parsers(subparsers: Any) -> None:
    """Add ``login``, ``token`` and ``logout`` to an ``argparse`` subparsers object.

    Each sets ``handler`` (``Namespace -> int``) through ``set_defaults``.
    """
    login = subparsers.add_parser("login", help="sign in to an MCP server and store the tokens")
    _client_options(login)
    login.add_argument("--scope", action="append", default=[], help="scope to request (repeat)")
    login.add_argument("--no-browser", action="store_true", help="print the URL, open nothing")
    login.add_argument("--port", type=int, default=0, help="loopback redirect port (0: any)")
    login.add_argument("--timeout", type=float, default=300.0, help="seconds to wait for sign-in")
    login.set_defaults(handler=cmd_login)

    token = subparsers.add_parser("token", help="print a valid access token (refreshing it)")
    _client_options(token)
    token.add_argument("--login", action="store_true", help="sign in if there is no usable token")
    token.add_argument("--method", default="POST", help="with --dpop: the request's method")
    token.add_argument("--url", dest="request_url", help="with --dpop: the request's URL")
    token.add_argument("--nonce", help="with --dpop: the nonce the server sent in DPoP-Nonce")
    token.set_defaults(handler=cmd_token, scope=[], no_browser=False, port=0, timeout=300.0)

    logout = subparsers.add_parser("logout", help="forget the tokens stored for an MCP server")
    logout.add_argument("url", help="the MCP server URL")
    logout.add_argument("--store", metavar="FILE", help="token file (MCPAUTH_CLIENT_STORE)")
    logout.set_defaults(handler=cmd_logout)


def _options(args: argparse.Namespace) -> dict[str, Any]:
    """What the flags say of the client, its grant and its policy: ``OAuth``'s keywords
    besides the storage and the redirect handler."""
    from mcpauth.client.credentials import ClientCredentials
    from mcpauth.client.options import (
        AuthorizationCodeGrant,
        ClientCredentialsGrant,
        DeviceCodeGrant,
        Policy,
        WorkloadIdentityGrant,
    )
    from mcpauth.client.registration import Registration

    secret = os.environ.get(args.client_secret_env) if args.client_secret_env else None
    credentials = None if args.client_id is None else ClientCredentials(args.client_id, secret)
    grant: Any = AuthorizationCodeGrant(scopes=args.scope)
    if args.device:
        grant = DeviceCodeGrant(scopes=args.scope, timeout=args.timeout)
    elif args.client_credentials:
        grant = ClientCredentialsGrant(scopes=args.scope)
    elif args.workload_token_file or args.workload_token_env:
        grant = WorkloadIdentityGrant(
            token_file=args.workload_token_file,
            token_env=args.workload_token_env,
            scopes=args.scope,
        )
    return {
        "credentials": credentials,
        "registration": Registration("mcpauth", client_metadata_url=args.client_metadata_url),
        "grant": grant,
        "policy": Policy(
            dpop="required" if args.dpop else "off", compatibility=_compatibility(args)
        ),
    }


def _oauth(args: argparse.Namespace) -> Any:
    from mcpauth.client import FileStorage, LoopbackRedirectHandler, OAuth

    handler = LoopbackRedirectHandler(
        port=args.port, open_browser=not args.no_browser, timeout=args.timeout
    )
    return OAuth(
        args.url, storage=FileStorage(args.store), redirect_handler=handler, **_options(args)
    )


def _compatibility(args: argparse.Namespace) -> Any:
    from mcpauth.client.compatibility import ServerCompatibility

    if args.entra_id:
        return ServerCompatibility.entra_id(args.entra_id)
    pairs = [item.partition("=") for item in args.map_scope]
    bad = [name for name, sep, _ in pairs if not sep or not name]
    if bad:
        raise SystemExit(f"mcpauth: --map-scope takes MCP=SERVER, got {bad[0]!r}")
    try:
        return ServerCompatibility(
            send_resource=not args.no_resource,
            resource=args.resource,
            scope_map={name: value for name, _, value in pairs},
            scope_prefix=args.scope_prefix,
            assume_pkce_s256=args.assume_pkce_s256,
        )
    except ValueError as exc:
        raise SystemExit(f"mcpauth: {exc}") from exc


def _run(args: argparse.Namespace, *, interactive: bool, force: bool) -> tuple[int, Any, Any]:
    """The exit code, the tokens (``None`` on failure) and the flow that got them."""
    import httpx2

    from mcpauth.client import errors

    outcomes: list[tuple[type[BaseException], int]] = [
        (errors.LoginRequired, EXIT_LOGIN_REQUIRED),
        (errors.AuthorizationFailed, EXIT_AUTHORIZATION_FAILED),
        (errors.DiscoveryError, EXIT_DISCOVERY_FAILED),
        (errors.RegistrationError, EXIT_DISCOVERY_FAILED),
        (errors.PKCENotSupported, EXIT_DISCOVERY_FAILED),
        (errors.ClientError, EXIT_REFUSED),
        (httpx2.HTTPError, EXIT_NETWORK),
    ]
    oauth = _oauth(args)
    try:
        return EXIT_OK, oauth.token_sync(force=force, interactive=interactive), oauth.flow
    except (errors.ClientError, httpx2.HTTPError) as exc:
        print(f"mcpauth: {exc}", file=sys.stderr)
        code = next(code for kind, code in outcomes if isinstance(exc, kind))
        return code, None, oauth.flow


def _stored(args: argparse.Namespace) -> tuple[Any, Any]:
    """The stored tokens when they are valid as they are, and their flow; ``(None, None)``
    when getting a token takes the network (a refresh), a browser or an error to report: the
    command then runs in full. Reading a stored token this way imports none of the HTTP
    stack."""
    from mcpauth.client.errors import ClientError
    from mcpauth.client.flow import FlowConfig, OAuthFlow
    from mcpauth.client.steps import Lock, StorageCall
    from mcpauth.client.storage import FileStorage

    flow = OAuthFlow(FlowConfig(args.url, **_options(args)), FileStorage(args.store))
    steps = flow.acquire_flow(interactive=args.login)
    try:
        step = next(steps)
        while isinstance(step, Lock | StorageCall):  # one process, one thread: no lock to take
            step = steps.send(step.run() if isinstance(step, StorageCall) else None)
    except StopIteration as done:
        return done.value, flow
    except ClientError:
        return None, None
    steps.close()
    return None, None


def cmd_login(args: argparse.Namespace) -> int:
    code, _, _ = _run(args, interactive=True, force=True)
    if code == EXIT_OK:
        print(f"Logged in to {args.url}.", file=sys.stderr)
    return code


def cmd_token(args: argparse.Namespace) -> int:
    code, (tokens, flow) = EXIT_OK, _stored(args)
    if tokens is None:
        code, tokens, flow = _run(args, interactive=args.login, force=False)
    if code != EXIT_OK:
        return code
    if not tokens.bound:
        print(tokens.access_token)
        return code
    key = flow.dpop_key
    if not args.dpop or key is None:
        print(
            "mcpauth: the stored token is DPoP-bound: add --dpop to print it with a proof",
            file=sys.stderr,
        )
        return EXIT_REFUSED
    url = args.request_url or args.url
    try:
        proof = key.proof(
            args.method.upper(), url, access_token=tokens.access_token, nonce=args.nonce
        )
    except ValueError:
        print(f"mcpauth: {url!r} is not an http(s) URL", file=sys.stderr)
        return EXIT_REFUSED
    print(f"Authorization: DPoP {tokens.access_token}")
    print(f"DPoP: {proof}")
    return code


def cmd_logout(args: argparse.Namespace) -> int:
    from mcpauth.client import FileStorage, OAuth

    OAuth(args.url, storage=FileStorage(args.store)).forget()
    print(f"Forgot the tokens for {args.url}.", file=sys.stderr)
    return EXIT_OK
