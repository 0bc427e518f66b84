"""browser sessions on the server

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-23 00:20:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "browser_sessions",
        sa.Column("digest", sa.String(length=64), nullable=False),
        sa.Column("user_id", sa.String(length=64), nullable=False),
        sa.Column("auth_time", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.Integer(), nullable=False),
        sa.Column("expires_at", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("digest", name=op.f("pk_browser_sessions")),
    )
    op.create_index(
        op.f("ix_browser_sessions_expires_at"), "browser_sessions", ["expires_at"], unique=False
    )
    op.create_index(
        op.f("ix_browser_sessions_user_id"), "browser_sessions", ["user_id"], unique=False
    )


def downgrade() -> None:
    op.drop_index(op.f("ix_browser_sessions_user_id"), table_name="browser_sessions")
    op.drop_index(op.f("ix_browser_sessions_expires_at"), table_name="browser_sessions")
    op.drop_table("browser_sessions")
