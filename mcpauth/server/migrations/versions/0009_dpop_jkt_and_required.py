"""authorization_codes.dpop_jkt (the key named by dpop_jkt at the authorization endpoint) and
resources.dpop_required (tokens for the resource must be DPoP-bound)

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-23 05:50:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("authorization_codes", schema=None) as batch_op:
        batch_op.add_column(sa.Column("dpop_jkt", sa.String(length=64), nullable=True))
    with op.batch_alter_table("resources", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("dpop_required", sa.Boolean(), nullable=False, server_default=sa.false())
        )


def downgrade() -> None:
    with op.batch_alter_table("resources", schema=None) as batch_op:
        batch_op.drop_column("dpop_required")
    with op.batch_alter_table("authorization_codes", schema=None) as batch_op:
        batch_op.drop_column("dpop_jkt")
