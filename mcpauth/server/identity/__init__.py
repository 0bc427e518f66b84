"""Who signs in: local passwords and the identity providers whose assertions the server trusts."""
