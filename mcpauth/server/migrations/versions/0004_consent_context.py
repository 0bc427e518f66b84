"""consent context: the redirect URI and client name the user approved

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-22 23:40:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("consents") as batch:
        batch.add_column(
            sa.Column("redirect_uri", sa.String(length=2048), nullable=False, server_default="")
        )
        batch.add_column(
            sa.Column("client_name", sa.String(length=200), nullable=False, server_default="")
        )


def downgrade() -> None:
    with op.batch_alter_table("consents") as batch:
        batch.drop_column("client_name")
        batch.drop_column("redirect_uri")
