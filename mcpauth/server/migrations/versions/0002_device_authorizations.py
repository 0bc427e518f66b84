"""device_authorizations: pending device authorization requests (RFC 8628), by the digests
of their device code and user code.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-28 10:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "device_authorizations",
        sa.Column("digest", sa.String(length=64), nullable=False),
        sa.Column("user_code_digest", sa.String(length=64), nullable=False),
        sa.Column("client_id", sa.String(length=2048), nullable=False),
        sa.Column("resource", sa.String(length=2048), nullable=False),
        sa.Column("scope", sa.Text(), nullable=False),
        sa.Column("offline", sa.Boolean(), nullable=False),
        sa.Column("created_at", sa.Integer(), nullable=False),
        sa.Column("expires_at", sa.Integer(), nullable=False),
        sa.Column("interval", sa.Integer(), nullable=False),
        sa.Column("polled_at", sa.Integer(), nullable=True),
        sa.Column("status", sa.String(length=10), nullable=False),
        sa.Column("user_id", sa.String(length=64), nullable=True),
        sa.Column("auth_time", sa.Integer(), nullable=True),
        sa.Column("grant_id", sa.String(length=64), nullable=True),
        sa.Column("redeemed_at", sa.Integer(), nullable=True),
        sa.PrimaryKeyConstraint("digest", name=op.f("pk_device_authorizations")),
        sa.UniqueConstraint(
            "user_code_digest", name=op.f("uq_device_authorizations_user_code_digest")
        ),
    )
    op.create_index(
        op.f("ix_device_authorizations_client_id"),
        "device_authorizations",
        ["client_id"],
        unique=False,
    )
    op.create_index(
        op.f("ix_device_authorizations_expires_at"),
        "device_authorizations",
        ["expires_at"],
        unique=False,
    )


def downgrade() -> None:
    op.drop_index(op.f("ix_device_authorizations_expires_at"), table_name="device_authorizations")
    op.drop_index(op.f("ix_device_authorizations_client_id"), table_name="device_authorizations")
    op.drop_table("device_authorizations")
