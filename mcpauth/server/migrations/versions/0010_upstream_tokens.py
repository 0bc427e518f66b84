"""upstream_tokens: people's tokens at upstream providers, sealed (keep_tokens)

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-23 06:45:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "upstream_tokens",
        sa.Column("user_id", sa.String(length=64), nullable=False),
        sa.Column("provider_id", sa.String(length=32), nullable=False),
        sa.Column("sealed", sa.Text(), nullable=False),
        sa.Column("expires_at", sa.Integer(), nullable=True),
        sa.Column("updated_at", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("user_id", "provider_id"),
    )


def downgrade() -> None:
    op.drop_table("upstream_tokens")
