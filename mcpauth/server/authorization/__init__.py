"""The authorization request: the authorize endpoint, the checks of each parameter (PKCE, resource,
scope), redirect URI rules, and the code or error that ends it."""
