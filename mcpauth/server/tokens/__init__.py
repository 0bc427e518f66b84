"""Tokens: the token endpoint and its grants, issuance of JWT access tokens and refresh tokens,
signing keys, revocation and introspection."""
