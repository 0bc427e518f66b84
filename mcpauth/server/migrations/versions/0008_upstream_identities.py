"""upstream identities and pending upstream sign-ins (sign-in through OpenID providers)

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-23 04:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
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
        sa.PrimaryKeyConstraint("issuer", "subject", name=op.f("pk_upstream_identities")),
    )
    op.create_index(
        op.f("ix_upstream_identities_user_id"), "upstream_identities", ["user_id"], unique=False
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
    op.create_index(
        op.f("ix_upstream_logins_expires_at"), "upstream_logins", ["expires_at"], unique=False
    )
    op.create_index(
        op.f("ix_upstream_logins_session_digest"),
        "upstream_logins",
        ["session_digest"],
        unique=False,
    )


def downgrade() -> None:
    op.drop_index(op.f("ix_upstream_logins_session_digest"), table_name="upstream_logins")
    op.drop_index(op.f("ix_upstream_logins_expires_at"), table_name="upstream_logins")
    op.drop_table("upstream_logins")
    op.drop_index(op.f("ix_upstream_identities_user_id"), table_name="upstream_identities")
    op.drop_table("upstream_identities")
