"""The client's DPoP (RFC 9449, docs/security.md T30): one key per authorization server, kept
in the file store (mode 0600) and reloaded by the next process; its proofs pass the server's
check; a bound token is sent with the DPoP scheme; workload tokens are read from a file or the
environment, again for each request. (The flows themselves are run by the official conformance
scenarios auth/dpop, auth/dpop-nonce and auth/wif-jwt-bearer and by
tests/middleware/e2e/test_dpop_end_to_end.py.)"""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from mcpauth.client import FileStorage, MemoryStorage, WorkloadIdentityGrant
from mcpauth.client.options import Policy
from mcpauth.client.proofs import DPoPKey, choose_algorithm
from mcpauth.client.tokens import TokenSet
from mcpauth.dpop import check_proof


def test_the_key_is_kept_private_in_the_store_and_reloaded(tmp_path: Path) -> None:
    path = tmp_path / "client.json"
    key = DPoPKey.generate("EdDSA")
    FileStorage(path).set_dpop_key("https://as.example", key)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    again = FileStorage(path).get_dpop_key("https://as.example")
    assert again is not None
    assert again.thumbprint == key.thumbprint
    assert "PRIVATE" not in repr(again)
    assert FileStorage(path).get_dpop_key("https://other.example") is None
    assert MemoryStorage().get_dpop_key("https://as.example") is None


def test_a_proof_from_the_key_passes_the_servers_check() -> None:
    key = DPoPKey.generate()
    proof = key.proof("POST", "https://mcp.example/mcp", access_token="t", nonce="n1")
    checked = check_proof(
        [proof], method="POST", url="https://mcp.example/mcp", access_token="t", nonce="n1"
    )
    assert checked.jkt == key.thumbprint


def test_the_algorithm_is_one_both_sides_know() -> None:
    assert choose_algorithm(["RS256", "EdDSA", "ES256"]) == "ES256"
    assert choose_algorithm(["EdDSA"]) == "EdDSA"
    assert choose_algorithm(["RS256"]) is None
    assert choose_algorithm(None) is None


def test_a_bound_token_says_dpop_in_its_authorization() -> None:
    assert TokenSet("abc", token_type="DPoP").authorization == "DPoP abc"
    assert TokenSet("abc").authorization == "Bearer abc"


def test_the_dpop_policy_is_checked() -> None:
    with pytest.raises(ValueError, match="dpop"):
        Policy(dpop="sometimes")  # type: ignore[arg-type]


def test_a_workload_token_comes_from_one_place_and_is_read_each_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("first\n")
    grant = WorkloadIdentityGrant(token_file=str(token_file))
    assert grant.read() == "first"
    token_file.write_text("rotated")
    assert grant.read() == "rotated"
    monkeypatch.setenv("CI_OIDC_TOKEN", "from-env")
    assert WorkloadIdentityGrant(token_env="CI_OIDC_TOKEN").read() == "from-env"
    with pytest.raises(ValueError, match="exactly one"):
        WorkloadIdentityGrant()
    with pytest.raises(ValueError, match="empty"):
        WorkloadIdentityGrant(token_env="NOT_SET_ANYWHERE").read()
    assert "first" not in repr(WorkloadIdentityGrant(token="first"))
