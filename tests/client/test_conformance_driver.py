"""The conformance driver: per-scenario choices only, and the suite itself when installed."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from mcpauth import jwt as jose
from mcpauth.client import (
    AuthorizationCodeGrant,
    CallableRedirectHandler,
    ClientCredentialsGrant,
    JWTBearerGrant,
    WorkloadIdentityGrant,
    conformance,
)

from .. import forks

ROOT = Path(__file__).resolve().parents[2]
URL = "http://localhost:1/mcp"
# what the driver imports when it runs a scenario
PRELOAD = ("mcpauth.client.conformance", "mcp", "mcp.client.streamable_http", "filelock")


def test_the_default_is_a_well_behaved_client_with_a_cimd_url() -> None:
    auth = conformance.build_auth(URL, "auth/metadata-default", {})
    assert isinstance(auth.flow.config.grant, AuthorizationCodeGrant)
    assert auth.flow.config.registration.client_metadata_url == conformance.CIMD_URL
    assert auth.flow.config.credentials is None
    assert isinstance(auth.redirect_handler, CallableRedirectHandler)


def test_pre_registration_uses_the_context_credentials() -> None:
    context = {"client_id": "pre-registered-client", "client_secret": "pre-registered-secret"}
    creds = conformance.build_auth(URL, "auth/pre-registration", context).flow.config.credentials
    assert creds is not None
    assert (creds.client_id, creds.auth_method) == ("pre-registered-client", "client_secret_basic")


def test_client_credentials_jwt_uses_the_context_key() -> None:
    pem = jose.private_key_to_pem(jose.generate_private_key("ES256")).decode()
    context = {"client_id": "c", "private_key_pem": pem, "signing_algorithm": "ES256"}
    config = conformance.build_auth(URL, "auth/client-credentials-jwt", context).flow.config
    assert isinstance(config.grant, ClientCredentialsGrant)
    assert config.credentials is not None
    assert config.credentials.auth_method == "private_key_jwt"


def test_cross_app_access_uses_the_jwt_bearer_grant() -> None:
    context = {
        "client_id": "x",
        "client_secret": "y",
        "idp_client_id": "i",
        "idp_id_token": "t",
        "idp_token_endpoint": "http://localhost:2/token",
    }
    config = conformance.build_auth(URL, "auth/cross-app-access-complete-flow", context).flow.config
    assert isinstance(config.grant, JWTBearerGrant)
    assert config.grant.identity.subject_token == "t"


def test_workload_identity_presents_the_platform_token_and_no_secret() -> None:
    context = {
        "client_id": "conformance-wif-workload",
        "valid_jwt": "platform.jwt.token",
        "wrong_audience_jwt": "other",
        "expired_jwt": "old",
    }
    config = conformance.build_auth(URL, "auth/wif-jwt-bearer", context).flow.config
    assert isinstance(config.grant, WorkloadIdentityGrant)
    assert config.grant.read() == "platform.jwt.token"
    assert config.credentials is not None
    assert config.credentials.client_id == "conformance-wif-workload"
    assert config.credentials.client_secret is None


def test_without_a_url_the_driver_prints_usage() -> None:
    assert conformance.main([]) == 2


@pytest.mark.conformance
@pytest.mark.timeout(600)  # seven suites of scenarios, each a client process; slow when loaded
@pytest.mark.skipif(
    os.environ.get("MCPAUTH_SKIP_CONFORMANCE") == "1" or shutil.which("npm") is None,
    reason="needs npm (the script installs Node 22 and the suite)",
)
def test_the_official_client_suites_pass(tmp_path: Path) -> None:
    # about eighty scenarios, each starting the client: forked from one process that has
    # imported the driver and the MCP SDK (tests/forks.py), not a new interpreter importing
    # them again (a second of CPU each)
    with forks.server(PRELOAD) as path:
        launcher = f"{sys.executable} -S {ROOT / 'tests' / 'forks.py'} launch {path}"
        env = {
            **os.environ,
            "RESULTS": str(tmp_path),
            "CONFORMANCE_CLIENT": f"{launcher} -m mcpauth.client.conformance",
        }
        result = subprocess.run(
            ["bash", str(ROOT / "scripts" / "conformance-client.sh")],
            capture_output=True,
            text=True,
            env=env,
            timeout=560,
            check=False,
        )
    assert result.returncode == 0, result.stderr
    # five released suites, the newest release's auth suite and its 2026-07-28 set
    summaries = sorted(p.name for p in tmp_path.glob("*.txt"))
    assert summaries == [
        "auth.txt",
        "backcompat.txt",
        "draft.txt",
        "extensions.txt",
        "metadata.txt",
        "next-auth.txt",
        "next-requirements.txt",
    ]
    requirements = (tmp_path / "next-requirements.txt").read_text()
    for scenario in ("auth/dpop", "auth/dpop-nonce", "auth/wif-jwt-bearer"):
        assert f"✓ {scenario}:" in requirements
