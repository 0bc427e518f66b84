"""The pages' colours meet WCAG 2.2 AA in light and dark mode: text 4.5:1, non-text (field
borders, focus rings, the markers of notices) 3:1; a configured accent gets readable text."""

from __future__ import annotations

import pytest

from mcpauth.server.browser.pages import PALETTE, Brand, contrast

TEXT = [("text", "page"), ("text", "card"), ("muted", "card"), ("muted", "page"), ("text", "new")]
NON_TEXT = [
    ("field", "card"),
    ("focus", "card"),
    ("focus", "page"),
    ("new-line", "card"),
    ("warn-line", "card"),
    ("error-line", "card"),
    ("ok-line", "card"),
]


@pytest.mark.parametrize("scheme", ["light", "dark"])
@pytest.mark.parametrize(("fore", "back"), TEXT)
def test_text_contrast(scheme: str, fore: str, back: str) -> None:
    colours = PALETTE[scheme]
    assert contrast(colours[fore], colours[back]) >= 4.5


@pytest.mark.parametrize("scheme", ["light", "dark"])
@pytest.mark.parametrize(("fore", "back"), NON_TEXT)
def test_non_text_contrast(scheme: str, fore: str, back: str) -> None:
    colours = PALETTE[scheme]
    assert contrast(colours[fore], colours[back]) >= 3


@pytest.mark.parametrize("accent", ["#2f5bd3", "#ffcc00", "#000000", "#ffffff", "#777777"])
def test_text_on_any_accent_is_the_more_readable_of_white_and_ink(accent: str) -> None:
    brand = Brand(accent=accent)
    other = "#111827" if brand.on_accent == "#ffffff" else "#ffffff"
    assert contrast(accent, brand.on_accent) >= contrast(accent, other)


def test_the_default_accent_meets_aa_for_button_text() -> None:
    assert contrast(Brand().accent, Brand().on_accent) >= 4.5


def test_contrast_is_the_wcag_ratio() -> None:
    assert contrast("#000000", "#ffffff") == pytest.approx(21)
    assert contrast("#777777", "#777777") == pytest.approx(1)
