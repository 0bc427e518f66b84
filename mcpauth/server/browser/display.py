"""How clients, hosts, redirect URIs and scopes are shown to people on the consent and account
pages: names without control or invisible characters, hosts in their ASCII (punycode) form with
a warning when they are not plain ASCII, custom-scheme redirects by their scheme, which client
details are believable enough to show (https, same site as the client), and the OpenID scopes
in plain words."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

import idna

from mcpauth.server.clients.records import clean_name
from mcpauth.uris import MalformedURL, is_loopback_host, parse_url

# what the OpenID scopes let the application learn (the resource's own scopes are described
# by its administrator)
IDENTITY_SCOPE_WORDS = {
    "openid": "Know who you are (your account's identifier on this service)",
    "profile": "See your name",
    "email": "See your email address, if it is verified",
}


def scope_words(scope: str, descriptions: dict[str, str]) -> str:
    """How ``scope`` reads on the consent page: the OpenID scopes in plain words, a resource's
    scope by the description its administrator gave (empty if none)."""
    return IDENTITY_SCOPE_WORDS.get(scope) or descriptions.get(scope, "")


def ascii_host(host: str) -> tuple[str, bool]:
    """The host as its ASCII form, and whether it is an internationalised name (shown with a
    warning: a host in another script can imitate a familiar one)."""
    host = host.lower()
    if host.isascii():
        return host, any(label.startswith("xn--") for label in host.split("."))
    try:
        return idna.encode(host, uts46=True).decode("ascii"), True
    except idna.IDNAError:
        return host.encode("ascii", "backslashreplace").decode("ascii"), True


@dataclass(frozen=True)
class RedirectView:
    label: str  # "this computer (127.0.0.1:5555)", "app.example.com", "the application ..."
    address: str = ""  # host[:port] in ASCII; empty for custom schemes
    warning: str = ""
    loopback: bool = False


def redirect_view(uri: str, *, self_registered: bool = False) -> RedirectView:
    """Where the browser is sent after the decision, as a person should read it; a warning when
    nothing ties that address to the application (a scheme any app on the device may claim, or
    a web address a ``self_registered`` client named itself)."""
    parts = urlsplit(uri)
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https"):
        return RedirectView(
            f"the application that handles {scheme}: links on this device",
            warning=(
                f"Any application installed on this device can ask to handle {scheme}: links. "
                "Only approve if you just started this from the application named above."
            ),
        )
    host, international = ascii_host(parts.hostname or "")
    label = f"{host}:{parts.port}" if parts.port else host
    if is_loopback_host(parts.hostname):
        return RedirectView(f"this computer ({label})", label, loopback=True)
    warnings = []
    if international:
        warnings.append(
            f"The address {label} contains characters outside plain ASCII (shown in its ASCII "
            "form); make sure it is the site you expect."
        )
    if self_registered:
        warnings.append(
            f"The application gave the address {label} itself and nothing confirms that it "
            "belongs to it; only approve if you expect to return to that site."
        )
    return RedirectView(label, label, " ".join(warnings))


def _site(host: str) -> str:
    """An approximation of the registrable domain: the last two labels."""
    return ".".join(host.split(".")[-2:])


def same_site_https(url: object, site_host: str | None) -> str | None:
    """``url`` when it is an https URL on the same site as ``site_host`` (any https URL when
    ``site_host`` is None), else None."""
    if not isinstance(url, str) or len(url) > 2048:
        return None
    try:
        parts = parse_url(url)
    except MalformedURL:
        return None
    host = parts.hostname
    if parts.scheme != "https" or not host or not host.isascii():
        return None
    if site_host is not None and _site(host) != _site(site_host.lower()):
        return None
    return url


# a self-registered client without redirect URIs: a device grant's client (RFC 8628)
SELF_REGISTERED_DEVICE = "Registered by itself, to sign in on a device"


@dataclass(frozen=True)
class ClientView:
    """A client as the consent and account pages show it."""

    client_id: str
    name: str
    unverified: bool
    origin: str
    uri: str | None = None
    logo: str | None = None

    @property
    def uri_host(self) -> str:
        return urlsplit(self.uri).netloc if self.uri else ""

    @property
    def label(self) -> str:
        """A name that tells two clients apart (for accessible button names)."""
        return f"{self.name} ({self.origin})"

    @property
    def img_origins(self) -> tuple[str, ...]:
        return (f"https://{urlsplit(self.logo).netloc}",) if self.logo else ()


def client_view(
    client_id: str, name: str, source: str, redirect_uris: list[str], metadata: dict[str, object]
) -> ClientView:
    """What a person may believe about a client: an admin-registered client is named by the
    administrator; a self-registered one (dynamic registration or a metadata document) only by
    itself, so it is marked unverified and shown with the host that vouches for it."""
    shown = clean_name(name) or "An unnamed application"
    if source == "cimd":
        parts = urlsplit(client_id)
        host, _ = ascii_host(parts.hostname or "")
        return ClientView(
            client_id,
            shown,
            True,
            f"{host}:{parts.port}" if parts.port else host,
            same_site_https(metadata.get("client_uri"), host),
            same_site_https(metadata.get("logo_uri"), host),
        )
    if source == "dcr":
        redirect = redirect_view(redirect_uris[0]) if redirect_uris else RedirectView("nowhere")
        site = urlsplit(redirect_uris[0]).hostname if redirect_uris else None
        https_site = site if redirect_uris and redirect_uris[0].startswith("https://") else None
        return ClientView(
            client_id,
            shown,
            True,
            (redirect.address or redirect.label) if redirect_uris else SELF_REGISTERED_DEVICE,
            same_site_https(metadata.get("client_uri"), https_site) if https_site else None,
            same_site_https(metadata.get("logo_uri"), https_site) if https_site else None,
        )
    return ClientView(
        client_id,
        shown,
        False,
        "Registered by your administrator",
        same_site_https(metadata.get("client_uri"), None),
        same_site_https(metadata.get("logo_uri"), None),
    )
