"""The replays use the server suite's account fixtures."""

from ..server.conftest import password_hash  # noqa: F401 - a fixture, used by name
