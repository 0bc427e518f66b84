"""What each domain package reads from the request (the protocol and accessor of its
``services.py``) is the object ``create_app`` builds, with every member the protocol names:
``mypy`` proves it statically in ``server/context.py``, this at run time."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from typing_extensions import get_protocol_members

from mcpauth.server.authorization.services import AuthorizationServices, authorization_services
from mcpauth.server.browser.services import BrowserServices, browser_services
from mcpauth.server.clients.services import ClientServices, client_services
from mcpauth.server.tokens.services import TokenServices, token_services

DOMAINS: list[tuple[type[Any], Callable[[Request], object]]] = [
    (ClientServices, client_services),
    (BrowserServices, browser_services),
    (AuthorizationServices, authorization_services),
    (TokenServices, token_services),
]


@pytest.mark.parametrize(("protocol", "accessor"), DOMAINS, ids=lambda d: d.__name__)
def test_each_domain_reads_its_services_from_the_app(
    app: Starlette, protocol: type[Any], accessor: Callable[[Request], object]
) -> None:
    services = accessor(Request({"type": "http", "app": app, "headers": []}))
    assert services is app.state.mcpauth
    members = get_protocol_members(protocol)
    assert {"settings", "db", "now"} <= members
    assert sorted(name for name in members if not hasattr(services, name)) == []
