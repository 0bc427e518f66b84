"""Discovery (CL-01..CL-05, CL-23, 2025-03-26 fallbacks), stepped without a network."""

from __future__ import annotations

import json

import pytest

from mcpauth.client._http import HTTPResponse
from mcpauth.client.challenge import BearerChallenge, parse_bearer_challenge
from mcpauth.client.discovery import discover, metadata_urls, prm_urls, resource_matches
from mcpauth.client.errors import DiscoveryError, IssuerMismatch, ResourceMismatch, UnsafeURL
from tests.client.conftest import Driver

RS = "https://mcp.example.com/mcp"
AS = "https://auth.example.com"
PRM_PATH = "https://mcp.example.com/.well-known/oauth-protected-resource/mcp"
PRM_ROOT = "https://mcp.example.com/.well-known/oauth-protected-resource"


def ok(document: dict[str, object]) -> HTTPResponse:
    return HTTPResponse(200, {"content-type": "application/json"}, json.dumps(document).encode())


def as_metadata(issuer: str = AS, **extra: object) -> dict[str, object]:
    return {
        "issuer": issuer,
        "authorization_endpoint": f"{issuer}/authorize",
        "token_endpoint": f"{issuer}/token",
        "code_challenge_methods_supported": ["S256"],
        **extra,
    }


PRM = {"resource": RS, "authorization_servers": [AS]}


def test_cl01_the_authorization_server_comes_from_protected_resource_metadata() -> None:
    driver = Driver(
        {
            f"GET {PRM_PATH}": ok(PRM),
            f"GET {AS}/.well-known/oauth-authorization-server": ok(as_metadata()),
        }
    )
    found = driver.run(discover(RS))
    assert found.issuer == AS
    assert found.resource == RS
    assert found.metadata.token_endpoint == f"{AS}/token"


def test_cl02_resource_metadata_and_scope_are_parsed_from_www_authenticate() -> None:
    header = (
        'Bearer error="invalid_token", error_description="Missing, header", '
        f'resource_metadata="{PRM_PATH}", scope="files:read files:write"'
    )
    challenge = parse_bearer_challenge([header])
    assert challenge is not None
    assert challenge.resource_metadata == PRM_PATH
    assert challenge.scopes == ["files:read", "files:write"]
    assert challenge.error == "invalid_token"


def test_cl02_a_bearer_challenge_is_found_among_other_schemes() -> None:
    challenge = parse_bearer_challenge(['DPoP algs="ES256", Bearer scope="a"', "Basic realm=x"])
    assert challenge is not None
    assert challenge.scope == "a"
    assert parse_bearer_challenge(['Basic realm="x"']) is None


def test_cl03_the_resource_metadata_url_from_the_challenge_is_tried_first() -> None:
    custom = "https://mcp.example.com/custom/metadata.json"
    assert prm_urls(RS, custom) == [custom, PRM_PATH, PRM_ROOT]
    driver = Driver(
        {
            f"GET {custom}": ok(PRM),
            f"GET {AS}/.well-known/oauth-authorization-server": ok(as_metadata()),
        }
    )
    driver.run(discover(RS, BearerChallenge({"resource_metadata": custom})))
    assert next(r.url for r in driver.requests()) == custom


def test_cl03_without_a_header_the_path_aware_url_comes_before_the_root_one() -> None:
    driver = Driver(
        {
            f"GET {PRM_ROOT}": ok({**PRM, "resource": "https://mcp.example.com"}),
            f"GET {AS}/.well-known/oauth-authorization-server": ok(as_metadata()),
        }
    )
    found = driver.run(discover(RS))
    assert [r.url for r in driver.requests()][:2] == [PRM_PATH, PRM_ROOT]
    assert found.resource == "https://mcp.example.com"


def test_cl03_a_server_at_the_root_skips_the_path_aware_url() -> None:
    assert prm_urls("https://mcp.example.com", None) == [PRM_ROOT]
    assert prm_urls("https://mcp.example.com/", None) == [PRM_ROOT]


def test_cl03_discovery_requests_carry_the_mcp_protocol_version() -> None:
    driver = Driver({f"GET {AS}/.well-known/oauth-authorization-server": ok(as_metadata())})
    driver.routes[f"GET {PRM_PATH}"] = ok(PRM)
    driver.run(discover(RS))
    assert all("mcp-protocol-version" in r.headers for r in driver.requests())


@pytest.mark.parametrize(
    ("issuer", "expected"),
    [
        (
            "https://a.example/tenant1",
            [
                "https://a.example/.well-known/oauth-authorization-server/tenant1",
                "https://a.example/.well-known/openid-configuration/tenant1",
                "https://a.example/tenant1/.well-known/openid-configuration",
            ],
        ),
        (
            "https://a.example",
            [
                "https://a.example/.well-known/oauth-authorization-server",
                "https://a.example/.well-known/openid-configuration",
            ],
        ),
    ],
)
def test_cl04_metadata_urls_follow_the_mcp_order(issuer: str, expected: list[str]) -> None:
    assert metadata_urls(issuer) == expected


def test_cl04_openid_configuration_is_used_when_rfc8414_metadata_is_missing() -> None:
    issuer = f"{AS}/tenant1"
    driver = Driver(
        {
            f"GET {PRM_PATH}": ok({**PRM, "authorization_servers": [issuer]}),
            f"GET {issuer}/.well-known/openid-configuration": ok(as_metadata(issuer)),
        }
    )
    found = driver.run(discover(RS))
    assert found.issuer == issuer
    assert len(driver.requests()) == 4  # PRM + three metadata URLs


@pytest.mark.parametrize("served", [f"{AS}/", "https://AUTH.example.com", "https://evil.example"])
def test_cl05_metadata_whose_issuer_is_not_identical_is_not_used(served: str) -> None:
    driver = Driver(
        {
            f"GET {PRM_PATH}": ok(PRM),
            f"GET {AS}/.well-known/oauth-authorization-server": ok(as_metadata(served)),
        }
    )
    with pytest.raises(IssuerMismatch):
        driver.run(discover(RS))


def test_rs03_protected_resource_metadata_for_another_resource_stops_discovery() -> None:
    driver = Driver({f"GET {PRM_PATH}": ok({**PRM, "resource": "https://evil.example.com/mcp"})})
    with pytest.raises(ResourceMismatch):
        driver.run(discover(RS))
    assert len(driver.requests()) == 1  # nothing is fetched from the named AS


@pytest.mark.parametrize(
    ("resource", "matches"),
    [
        (RS, True),
        ("https://MCP.example.com:443/mcp", True),
        ("https://mcp.example.com", True),
        ("https://mcp.example.com/mc", False),
        ("https://mcp.example.com/mcp/sub", False),
        ("http://mcp.example.com/mcp", False),
        ("https://mcp.example.com:8443/mcp", False),
    ],
)
def test_rs03_resource_matching_is_by_origin_and_path_segments(
    resource: str, matches: bool
) -> None:
    assert resource_matches(resource, RS) is matches


def test_cl01_metadata_without_authorization_servers_is_an_error() -> None:
    driver = Driver({f"GET {PRM_PATH}": ok({"resource": RS})})
    with pytest.raises(DiscoveryError, match="authorization_servers"):
        driver.run(discover(RS))


def test_cl01_missing_metadata_for_a_named_authorization_server_is_an_error() -> None:
    driver = Driver({f"GET {PRM_PATH}": ok(PRM)})
    with pytest.raises(DiscoveryError, match="no authorization server metadata"):
        driver.run(discover(RS))


@pytest.mark.parametrize(
    "url",
    ["javascript:alert(1)", "file:///etc/passwd", "http://mcp.example.com/prm", "ftp://x/y"],
)
def test_cl23_untrusted_resource_metadata_urls_are_refused(url: str) -> None:
    with pytest.raises(UnsafeURL):
        Driver().run(discover(RS, BearerChallenge({"resource_metadata": url})))


def test_cl23_authorization_servers_over_plain_http_off_loopback_are_refused() -> None:
    driver = Driver(
        {f"GET {PRM_PATH}": ok({**PRM, "authorization_servers": ["http://as.example"]})}
    )
    with pytest.raises(UnsafeURL):
        driver.run(discover(RS))


def test_cl23_endpoints_with_a_dangerous_scheme_are_refused() -> None:
    bad = as_metadata(authorization_endpoint="javascript:alert(1)")
    driver = Driver(
        {f"GET {PRM_PATH}": ok(PRM), f"GET {AS}/.well-known/oauth-authorization-server": ok(bad)}
    )
    with pytest.raises(UnsafeURL):
        driver.run(discover(RS))


def test_2025_03_26_without_prm_the_metadata_comes_from_the_server_origin() -> None:
    legacy = as_metadata("https://mcp.example.com/oauth")
    driver = Driver(
        {"GET https://mcp.example.com/.well-known/oauth-authorization-server": ok(legacy)}
    )
    found = driver.run(discover(RS))
    assert found.legacy
    assert found.issuer == "https://mcp.example.com/oauth"
    assert found.resource == RS


def test_2025_03_26_legacy_metadata_from_another_origin_is_rejected() -> None:
    legacy = as_metadata("https://other.example.com")
    driver = Driver(
        {"GET https://mcp.example.com/.well-known/oauth-authorization-server": ok(legacy)}
    )
    with pytest.raises(IssuerMismatch):
        driver.run(discover(RS))


def test_2025_03_26_without_any_metadata_the_default_endpoints_are_used() -> None:
    found = Driver().run(discover(RS))
    assert found.metadata.authorization_endpoint == "https://mcp.example.com/authorize"
    assert found.metadata.token_endpoint == "https://mcp.example.com/token"
    assert found.metadata.registration_endpoint == "https://mcp.example.com/register"


def test_cl06_the_selector_chooses_among_several_authorization_servers() -> None:
    second = "https://second.example.com"
    driver = Driver(
        {
            f"GET {PRM_PATH}": ok({**PRM, "authorization_servers": [AS, second]}),
            f"GET {second}/.well-known/oauth-authorization-server": ok(as_metadata(second)),
        }
    )
    found = driver.run(discover(RS, select=lambda servers: servers[-1]))
    assert found.issuer == second


def test_discovery_round_trips_through_json() -> None:
    driver = Driver(
        {
            f"GET {PRM_PATH}": ok(PRM),
            f"GET {AS}/.well-known/oauth-authorization-server": ok(as_metadata()),
        }
    )
    found = driver.run(discover(RS))
    assert type(found).from_json(json.loads(json.dumps(found.to_json()))) == found
