"""refresh_tokens.dpop_jkt: the DPoP key a public client's refresh token is bound to

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-23 03:20:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("refresh_tokens", schema=None) as batch_op:
        batch_op.add_column(sa.Column("dpop_jkt", sa.String(length=64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("refresh_tokens", schema=None) as batch_op:
        batch_op.drop_column("dpop_jkt")
