"""docs/configuration.md is the reference generated from Settings: every setting is documented
there with its environment variable, default and meaning."""

from __future__ import annotations

from pathlib import Path

from mcpauth.server.config import Settings, reference

DOC = Path(__file__).resolve().parents[1] / "docs" / "configuration.md"


def test_the_configuration_reference_is_current() -> None:
    regenerate = "from mcpauth.server.config import reference; print(reference(), end='')"
    assert DOC.read_text() == reference(), f'regenerate it: python -c "{regenerate}"'


def test_every_setting_has_a_meaning() -> None:
    undocumented = [name for name, field in Settings.model_fields.items() if not field.description]
    assert undocumented == []
