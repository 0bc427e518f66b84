"""Clients: the registry of registered and metadata-document clients, RFC 7591 registration, RFC
7592 management, client authentication and assertions, and the SSRF-safe fetching of client-
controlled URLs."""
