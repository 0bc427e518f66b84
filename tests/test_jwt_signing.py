"""The compact JWS signer: what it signs, PyJWT verifies, for every supported algorithm."""

from __future__ import annotations

import ast
import base64
import json
from pathlib import Path

import jwt as pyjwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from mcpauth import jwt

CLAIMS = {
    "iss": "https://as.example.com",
    "sub": "client-1",
    "aud": "https://mcp.example.com/mcp",
    "scope": "mcp:read",
    "iat": 1_700_000_000,
    "exp": 1_700_000_600,
    "jti": "j-1",
    "name": "Zoë \u2603",
}


def _segment(token: str, index: int) -> dict[str, object]:
    part = token.split(".")[index]
    decoded: dict[str, object] = json.loads(base64.urlsafe_b64decode(part + "=" * (-len(part) % 4)))
    return decoded


@pytest.mark.parametrize("alg", jwt.ALGORITHMS)
def test_pyjwt_verifies_what_the_signer_signs(alg: jwt.Algorithm) -> None:
    key = jwt.generate_private_key(alg)
    signer = jwt.CompactSigner(key, alg=alg, kid="k1")
    for typ in ("at+jwt", "JWT", "at+jwt"):  # the second at+jwt uses the cached header
        token = signer.sign(CLAIMS, typ)
        assert _segment(token, 0) == {"alg": alg, "kid": "k1", "typ": typ}
        claims = pyjwt.decode(
            token,
            key.public_key(),
            algorithms=[alg],
            audience=CLAIMS["aud"],
            options={"verify_exp": False},
        )
        assert claims == CLAIMS
        assert "=" not in token


def test_es256_signatures_are_raw_r_and_s_of_32_bytes_each() -> None:
    key = jwt.generate_private_key("ES256")
    token = jwt.CompactSigner(key, alg="ES256", kid="k").sign(CLAIMS)
    signature = token.rsplit(".", 1)[1]
    assert len(base64.urlsafe_b64decode(signature + "=" * (-len(signature) % 4))) == 64


def test_a_key_that_cannot_make_the_algorithm_is_refused() -> None:
    with pytest.raises(ValueError, match="cannot sign"):
        jwt.CompactSigner(ec.generate_private_key(ec.SECP256R1()), alg="RS256", kid="k")
    with pytest.raises(ValueError, match="cannot sign"):
        jwt.CompactSigner(jwt.generate_private_key("EdDSA"), alg="ES256", kid="k")
    with pytest.raises(ValueError, match="cannot sign"):  # RFC 7518 §3.4: ES256 means P-256
        jwt.CompactSigner(ec.generate_private_key(ec.SECP384R1()), alg="ES256", kid="k")


@pytest.mark.parametrize(
    ("alg", "key"),
    [
        ("ES384", ec.generate_private_key(ec.SECP384R1())),
        ("ES512", ec.generate_private_key(ec.SECP521R1())),
        ("PS256", rsa.generate_private_key(public_exponent=65537, key_size=2048)),
        ("RS512", rsa.generate_private_key(public_exponent=65537, key_size=2048)),
    ],
)
def test_encode_signs_other_algorithms_through_pyjwt(alg: str, key: jwt.PrivateKey) -> None:
    """A client's private_key_jwt assertion may use any algorithm the server advertises."""
    token = jwt.encode({"iss": "c", "sub": "c"}, key, alg=alg, kid="k", typ="JWT")
    assert _segment(token, 0) == {"alg": alg, "kid": "k", "typ": "JWT"}
    assert pyjwt.decode(token, key.public_key(), algorithms=[alg]) == {"iss": "c", "sub": "c"}


def test_a_tampered_payload_fails_verification() -> None:
    key = jwt.generate_private_key("ES256")
    header, _, signature = jwt.CompactSigner(key, alg="ES256", kid="k").sign(CLAIMS).split(".")
    forged = base64.urlsafe_b64encode(json.dumps({**CLAIMS, "sub": "admin"}).encode()).rstrip(b"=")
    with pytest.raises(pyjwt.InvalidSignatureError):
        pyjwt.decode(
            f"{header}.{forged.decode()}.{signature}",
            key.public_key(),
            algorithms=["ES256"],
            options={"verify_aud": False, "verify_exp": False},
        )


def test_only_the_shared_jose_modules_import_pyjwt() -> None:
    """PyJWT is the JOSE library; every other module goes through mcpauth.jwt or mcpauth.dpop
    (docs/architecture.md, "One stack per concern")."""
    package = Path(__file__).resolve().parents[1] / "mcpauth"
    found = []
    for path in package.rglob("*.py"):
        if path.name in ("jwt.py", "dpop.py") and path.parent == package:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom) and node.level == 0
                else []
            )
            found += [str(path.relative_to(package)) for n in names if n.split(".")[0] == "jwt"]
    assert not found, f"these import PyJWT directly: {found}"
