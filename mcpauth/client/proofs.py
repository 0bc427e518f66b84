"""The client's DPoP key (RFC 9449): one per authorization server, kept by the storage with
the tokens bound to it, and the proofs it signs for token requests and for every request to
the MCP server (with ``ath``). ES256 by default, EdDSA when the server offers only that."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # cryptography is imported when a key is used (not for a Bearer token)
    from cryptography.hazmat.primitives.asymmetric import ec, ed25519

    PrivateKey = ec.EllipticCurvePrivateKey | ed25519.Ed25519PrivateKey

# What this client signs with, in order of preference.
ALGORITHMS = ("ES256", "EdDSA")


def choose_algorithm(offered: Any) -> str | None:
    """The first of :data:`ALGORITHMS` the server lists in ``dpop_signing_alg_values_supported``."""
    if not isinstance(offered, list):
        return None
    return next((alg for alg in ALGORITHMS if alg in offered), None)


@dataclass(frozen=True)
class DPoPKey:
    """A private key and the algorithm it signs with; never printed."""

    key: PrivateKey
    alg: str

    def __repr__(self) -> str:
        return f"DPoPKey(alg={self.alg!r}, jkt={self.thumbprint!r})"

    @classmethod
    def generate(cls, alg: str = "ES256") -> DPoPKey:
        from cryptography.hazmat.primitives.asymmetric import ec, ed25519

        if alg == "EdDSA":
            return cls(ed25519.Ed25519PrivateKey.generate(), alg)
        if alg == "ES256":
            return cls(ec.generate_private_key(ec.SECP256R1()), alg)
        raise ValueError(f"unsupported DPoP algorithm {alg!r}")

    @property
    def thumbprint(self) -> str:
        """RFC 7638 thumbprint: what a bound token's ``cnf.jkt`` names."""
        from mcpauth import jwt

        return jwt.thumbprint(jwt.public_jwk(self.key.public_key(), kid="", alg=self.alg))

    def proof(
        self, method: str, url: str, *, access_token: str | None = None, nonce: str | None = None
    ) -> str:
        from mcpauth.dpop import make_proof

        return make_proof(
            self.key, alg=self.alg, method=method, url=url, access_token=access_token, nonce=nonce
        )

    def to_json(self) -> dict[str, str]:
        from cryptography.hazmat.primitives import serialization

        pem = self.key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        return {"alg": self.alg, "pem": pem.decode("ascii")}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> DPoPKey | None:
        """The key stored by :meth:`to_json`; None when the record is not one."""
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import ec, ed25519

        try:
            key = serialization.load_pem_private_key(str(data["pem"]).encode(), password=None)
        except (KeyError, ValueError, TypeError):
            return None
        alg = data.get("alg")
        if alg == "ES256" and isinstance(key, ec.EllipticCurvePrivateKey):
            return cls(key, alg)
        if alg == "EdDSA" and isinstance(key, ed25519.Ed25519PrivateKey):
            return cls(key, alg)
        return None
