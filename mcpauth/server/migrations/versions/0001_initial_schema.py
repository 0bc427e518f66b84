"""initial schema

The schema of mcpauth 0.1.0: the development revisions (0001 to 0013) squashed into one before
the first release, column for column, index for index and default for default (columns that
were added to a table later come after its first ones, as those revisions left them).

Revision ID: 0001
Revises:
Create Date: 2026-11-26 22:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _index(table: str, *columns: str, name: str | None = None, unique: bool = False) -> None:
    op.create_index(
        name or op.f(f"ix_{table}_{'_'.join(columns)}"), table, list(columns), unique=unique
    )


def _users_and_clients() -> None:
    op.create_table(
        "users",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("username", sa.String(length=200), nullable=False),
        sa.Column("password_hash", sa.String(length=255), nullable=False),
        sa.Column("created_at", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_users")),
        sa.UniqueConstraint("username", name=op.f("uq_users_username")),
    )
    op.create_table(
        "clients",
        sa.Column("client_id", sa.String(length=2048), nullable=False),
        sa.Column("secret_digest", sa.String(length=64), nullable=True),
        sa.Column("secret_expires_at", sa.Integer(), nullable=False),
        sa.Column("client_name", sa.String(length=200), nullable=False),
        sa.Column("redirect_uris", sa.JSON(), nullable=False),
        sa.Column("grant_types", sa.JSON(), nullable=False),
        sa.Column("response_types", sa.JSON(), nullable=False),
        sa.Column("token_endpoint_auth_method", sa.String(length=40), nullable=False),
        sa.Column("application_type", sa.String(length=10), nullable=False),
        sa.Column("scope", sa.Text(), nullable=True),
        sa.Column("jwks", sa.JSON(), nullable=True),
        sa.Column("jwks_uri", sa.String(length=2048), nullable=True),
        sa.Column("client_metadata", sa.JSON(), nullable=False),
        sa.Column("first_party", sa.Boolean(), nullable=False),
        sa.Column("introspect", sa.Boolean(), nullable=False),
        sa.Column("registration_token_digest", sa.String(length=64), nullable=True),
        sa.Column("source", sa.String(length=10), nullable=False),
        sa.Column("created_at", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("client_id", name=op.f("pk_clients")),
    )
    _index("clients", "registration_token_digest")
    op.create_table(
        "resources",
        sa.Column("uri", sa.String(length=2048), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("scopes", sa.JSON(), nullable=False),
        sa.Column("default_scopes", sa.JSON(), nullable=False),
        sa.Column("is_default", sa.Boolean(), nullable=False),
        sa.Column("created_at", sa.Integer(), nullable=False),
        sa.Column("dpop_required", sa.Boolean(), nullable=False, server_default=sa.false()),
        sa.Column("token_claims", sa.JSON(), nullable=False, server_default="[]"),
        sa.PrimaryKeyConstraint("uri", name=op.f("pk_resources")),
    )


def _grants() -> None:
    op.create_table(
        "grants",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("user_id", sa.String(length=64), nullable=False),
        sa.Column("client_id", sa.String(length=2048), nullable=False),
        sa.Column("resource", sa.String(length=2048), nullable=False),
        sa.Column("scope", sa.Text(), nullable=False),
        sa.Column("created_at", sa.Integer(), nullable=False),
        sa.Column("last_used_at", sa.Integer(), nullable=False),
        sa.Column("revoked_at", sa.Integer(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_grants")),
    )
    _index("grants", "user_id", "client_id", name="ix_grants_user_id_client_id")
    _index("grants", "client_id")
    op.create_table(
        "authorization_codes",
        sa.Column("digest", sa.String(length=64), nullable=False),
        sa.Column("grant_id", sa.String(length=64), nullable=False),
        sa.Column("client_id", sa.String(length=2048), nullable=False),
        sa.Column("user_id", sa.String(length=64), nullable=False),
        sa.Column("redirect_uri", sa.String(length=2048), nullable=False),
        sa.Column("code_challenge", sa.String(length=128), nullable=False),
        sa.Column("resource", sa.String(length=2048), nullable=False),
        sa.Column("scope", sa.Text(), nullable=False),
        sa.Column("offline", sa.Boolean(), nullable=False),
        sa.Column("auth_time", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.Integer(), nullable=False),
        sa.Column("expires_at", sa.Integer(), nullable=False),
        sa.Column("redeemed_at", sa.Integer(), nullable=True),
        sa.Column("dpop_jkt", sa.String(length=64), nullable=True),
        sa.Column("nonce", sa.String(length=255), nullable=True),
        sa.PrimaryKeyConstraint("digest", name=op.f("pk_authorization_codes")),
    )
    _index("authorization_codes", "grant_id")
    op.create_table(
        "refresh_tokens",
        sa.Column("digest", sa.String(length=64), nullable=False),
        sa.Column("grant_id", sa.String(length=64), nullable=False),
        sa.Column("client_id", sa.String(length=2048), nullable=False),
        sa.Column("scope", sa.Text(), nullable=False),
        sa.Column("resource", sa.String(length=2048), nullable=False),
        sa.Column("created_at", sa.Integer(), nullable=False),
        sa.Column("expires_at", sa.Integer(), nullable=False),
        sa.Column("rotated_at", sa.Integer(), nullable=True),
        sa.Column("dpop_jkt", sa.String(length=64), nullable=True),
        sa.PrimaryKeyConstraint("digest", name=op.f("pk_refresh_tokens")),
    )
    _index("refresh_tokens", "grant_id")
    _index("refresh_tokens", "client_id")
    op.create_table(
        "consents",
        sa.Column("user_id", sa.String(length=64), nullable=False),
        sa.Column("client_id", sa.String(length=2048), nullable=False),
        sa.Column("resource", sa.String(length=2048), nullable=False),
        sa.Column("scope", sa.Text(), nullable=False),
        sa.Column("updated_at", sa.Integer(), nullable=False),
        sa.Column("redirect_uri", sa.String(length=2048), nullable=False, server_default=""),
        sa.Column("client_name", sa.String(length=200), nullable=False, server_default=""),
        sa.PrimaryKeyConstraint("user_id", "client_id", "resource", name=op.f("pk_consents")),
    )
    op.create_table(
        "revoked_access_tokens",
        sa.Column("jti", sa.String(length=128), nullable=False),
        sa.Column("expires_at", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("jti", name=op.f("pk_revoked_access_tokens")),
    )
    _index("revoked_access_tokens", "expires_at")


def _short_lived_state() -> None:
    op.create_table(
        "interactions",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("request", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.Integer(), nullable=False),
        sa.Column("expires_at", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_interactions")),
    )
    _index("interactions", "expires_at")
    op.create_table(
        "browser_sessions",
        sa.Column("digest", sa.String(length=64), nullable=False),
        sa.Column("user_id", sa.String(length=64), nullable=False),
        sa.Column("auth_time", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.Integer(), nullable=False),
        sa.Column("expires_at", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("digest", name=op.f("pk_browser_sessions")),
    )
    _index("browser_sessions", "expires_at")
    _index("browser_sessions", "user_id")
    op.create_table(
        "used_assertions",
        sa.Column("key", sa.String(length=64), nullable=False),
        sa.Column("expires_at", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("key", name=op.f("pk_used_assertions")),
    )
    _index("used_assertions", "expires_at")
    op.create_table(
        "throttles",
        sa.Column("key", sa.String(length=300), nullable=False),
        sa.Column("failures", sa.Integer(), nullable=False),
        sa.Column("window_start", sa.Integer(), nullable=False),
        sa.Column("locked_until", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("key", name=op.f("pk_throttles")),
    )
    op.create_table(
        "rate_counters",
        sa.Column("key", sa.String(length=300), nullable=False),
        sa.Column("window_start", sa.Integer(), nullable=False),
        sa.Column("count", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("key", name=op.f("pk_rate_counters")),
    )
    op.create_table(
        "signing_keys",
        sa.Column("kid", sa.String(length=64), nullable=False),
        sa.Column("alg", sa.String(length=10), nullable=False),
        sa.Column("public_jwk", sa.JSON(), nullable=False),
        sa.Column("private_key", sa.Text(), nullable=False),
        sa.Column("created_at", sa.Integer(), nullable=False),
        sa.Column("active_at", sa.Integer(), nullable=False),
        sa.Column("retired_at", sa.Integer(), nullable=True),
        sa.Column("expires_at", sa.Integer(), nullable=True),
        sa.PrimaryKeyConstraint("kid", name=op.f("pk_signing_keys")),
    )


def _upstream() -> None:
    op.create_table(
        "upstream_identities",
        sa.Column("issuer", sa.String(length=300), nullable=False),
        sa.Column("subject", sa.String(length=255), nullable=False),
        sa.Column("user_id", sa.String(length=64), nullable=False),
        sa.Column("provider_id", sa.String(length=32), nullable=False),
        sa.Column("email", sa.String(length=320), nullable=True),
        sa.Column("email_verified", sa.Boolean(), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=True),
        sa.Column("created_at", sa.Integer(), nullable=False),
        sa.Column("last_login_at", sa.Integer(), nullable=False),
        sa.Column("groups", sa.JSON(), nullable=False, server_default="[]"),
        sa.PrimaryKeyConstraint("issuer", "subject", name=op.f("pk_upstream_identities")),
    )
    _index("upstream_identities", "user_id")
    # one identity per issuer per account: two links started at once cannot both attach one
    _index(
        "upstream_identities",
        "user_id",
        "issuer",
        name="ix_upstream_identities_user_issuer",
        unique=True,
    )
    op.create_table(
        "upstream_logins",
        sa.Column("digest", sa.String(length=64), nullable=False),
        sa.Column("provider_id", sa.String(length=32), nullable=False),
        sa.Column("interaction_id", sa.String(length=64), nullable=True),
        sa.Column("session_digest", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.Integer(), nullable=False),
        sa.Column("expires_at", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("digest", name=op.f("pk_upstream_logins")),
    )
    _index("upstream_logins", "expires_at")
    _index("upstream_logins", "session_digest")
    op.create_table(
        "upstream_tokens",
        sa.Column("user_id", sa.String(length=64), nullable=False),
        sa.Column("provider_id", sa.String(length=32), nullable=False),
        sa.Column("sealed", sa.Text(), nullable=False),
        sa.Column("expires_at", sa.Integer(), nullable=True),
        sa.Column("updated_at", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("user_id", "provider_id"),  # unnamed: the engine's own name
    )


def upgrade() -> None:
    _users_and_clients()
    _grants()
    _short_lived_state()
    _upstream()


TABLES = (
    "users",
    "clients",
    "resources",
    "grants",
    "authorization_codes",
    "refresh_tokens",
    "consents",
    "revoked_access_tokens",
    "interactions",
    "browser_sessions",
    "used_assertions",
    "throttles",
    "rate_counters",
    "signing_keys",
    "upstream_identities",
    "upstream_logins",
    "upstream_tokens",
)


def downgrade() -> None:
    for table in reversed(TABLES):
        op.drop_table(table)  # its indexes go with it
