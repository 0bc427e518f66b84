"""upstream_identities.groups (the group names of the last sign-in) and resources.token_claims
(which of a person's claims the resource's access tokens carry)

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-23 08:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("upstream_identities", schema=None) as batch_op:
        batch_op.add_column(sa.Column("groups", sa.JSON(), nullable=False, server_default="[]"))
    with op.batch_alter_table("resources", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("token_claims", sa.JSON(), nullable=False, server_default="[]")
        )


def downgrade() -> None:
    with op.batch_alter_table("resources", schema=None) as batch_op:
        batch_op.drop_column("token_claims")
    with op.batch_alter_table("upstream_identities", schema=None) as batch_op:
        batch_op.drop_column("groups")
