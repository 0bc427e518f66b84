"""The client's DPoP (RFC 9449, docs/security.md T30): one key per authorization server, kept
in the file store (mode 0600) and reloaded by the next process; its proofs pass the server's
check; a bound token is sent with the DPoP scheme; the challenge of the scheme a request used is
the one acted on; workload tokens are read from a file or the environment, again for each
request. (The flows are in test_dpop_flow.py, the official conformance scenarios auth/dpop,
auth/dpop-nonce and auth/wif-jwt-bearer, and the end-to-end tests with ``mcpauth serve``.)"""

from __future__ import annotations

import stat
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

from mcpauth.client import FileStorage, MemoryStorage, WorkloadIdentityGrant
from mcpauth.client.challenge import offered_dpop_algs, parse_bearer_challenge
from mcpauth.client.dpop_state import DPoPState
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


def key_for(state: DPoPState, storage: MemoryStorage, issuer: str, offered: list[str]) -> Any:
    """Run :meth:`DPoPState.key_for` with ``storage`` called in place."""

    def store(method: str, *args: Any) -> Generator[Any, Any, Any]:
        return getattr(storage, method)(*args)
        yield  # a generator, as the flow's storage calls are

    flow = state.key_for(issuer, offered, "auto", store)
    with pytest.raises(StopIteration) as done:
        next(flow)
    return done.value.value


def test_one_key_per_authorization_server_kept_while_its_algorithm_is_offered() -> None:
    storage = MemoryStorage()
    first = key_for(DPoPState(), storage, "https://a.example", ["EdDSA"])
    other = key_for(DPoPState(), storage, "https://b.example", ["EdDSA"])
    assert first.thumbprint != other.thumbprint
    # another process, the server now also offering ES256 (which this client prefers): the
    # stored EdDSA key stays, and so do the refresh tokens bound to it
    again = key_for(DPoPState(), storage, "https://a.example", ["ES256", "EdDSA"])
    assert again.thumbprint == first.thumbprint
    # EdDSA no longer offered: a new key of an offered algorithm replaces it
    replaced = key_for(DPoPState(), storage, "https://a.example", ["ES256"])
    assert replaced.alg == "ES256"
    stored = storage.get_dpop_key("https://a.example")
    assert stored is not None
    assert stored.thumbprint == replaced.thumbprint


def test_the_challenge_of_the_scheme_used_is_the_one_acted_on() -> None:
    headers = [
        'Bearer scope="files:read files:write", resource_metadata="https://rs.example/prm"',
        'DPoP algs="ES256 EdDSA", error="insufficient_scope", scope="files:read files:write"',
    ]
    as_dpop = parse_bearer_challenge(headers, dpop=True)
    assert as_dpop is not None
    assert (as_dpop.scheme, as_dpop.error) == ("dpop", "insufficient_scope")
    as_bearer = parse_bearer_challenge(headers)
    assert as_bearer is not None
    assert (as_bearer.scheme, as_bearer.error) == ("bearer", None)
    # a resource that takes only DPoP: its challenge names the metadata all the same
    only = parse_bearer_challenge(['DPoP resource_metadata="https://rs.example/prm"'])
    assert only is not None
    assert only.resource_metadata == "https://rs.example/prm"


def test_the_algorithms_a_resource_offers() -> None:
    assert offered_dpop_algs(['Bearer realm="x"', 'DPoP algs="EdDSA ES256"']) == ["EdDSA", "ES256"]
    assert offered_dpop_algs(['DPoP error="invalid_token"']) == []
    assert offered_dpop_algs(['Bearer error="invalid_token"']) is None
