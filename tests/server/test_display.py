"""What the consent and account pages show of a client: who vouches for its name, and its
client_uri and logo only over https on the client's own site."""

from __future__ import annotations

from mcpauth.server.browser.display import clean_name, client_view, redirect_view


def test_a_metadata_document_client_shows_its_host_and_only_same_site_https_details() -> None:
    view = client_view(
        "https://app.example.com/client.json",
        "App",
        "cimd",
        ["http://127.0.0.1/cb"],
        {
            "client_uri": "https://www.example.com/about",
            "logo_uri": "https://cdn.evil.example/logo.png",
        },
    )
    assert view.unverified
    assert view.origin == "app.example.com"
    assert view.uri == "https://www.example.com/about"  # same site as the client id
    assert view.logo is None  # another site: not shown


def test_a_dynamically_registered_loopback_client_shows_no_client_uri_or_logo() -> None:
    view = client_view(
        "abc",
        "Tool",
        "dcr",
        ["http://127.0.0.1:5555/cb"],
        {"client_uri": "https://tool.example", "logo_uri": "https://tool.example/l.png"},
    )
    assert view.unverified
    assert view.origin == "127.0.0.1:5555"
    assert (view.uri, view.logo) == (None, None)  # nothing vouches for them


def test_an_admin_client_is_not_marked_and_shows_https_details_only() -> None:
    view = client_view(
        "abc",
        "Desk",
        "admin",
        ["https://desk.example/cb"],
        {"client_uri": "http://desk.example", "logo_uri": "https://desk.example/logo.png"},
    )
    assert not view.unverified
    assert view.uri is None  # plain http
    assert view.logo == "https://desk.example/logo.png"
    assert view.img_origins == ("https://desk.example",)


def test_names_lose_invisible_characters_and_long_names_are_cut() -> None:
    assert clean_name("A\u202eB\u200cC\u0000  D") == "ABC D"
    assert len(clean_name("x" * 500)) == 80
    assert clean_name("\u200b") == ""


def test_redirects_are_shown_as_a_person_reads_them() -> None:
    assert redirect_view("http://127.0.0.1:8/cb").label == "this computer (127.0.0.1:8)"
    assert redirect_view("com.example.app:/cb").label.startswith("the application that handles")
    international = redirect_view("https://b\u00fccher.example/cb")
    assert international.label == "xn--bcher-kva.example"
    assert international.warning
