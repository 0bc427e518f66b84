"""authorization_codes.nonce: the OpenID ``nonce`` of the authorization request, echoed in
the ID token the code's exchange returns.

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-26 15:40:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("authorization_codes", schema=None) as batch_op:
        batch_op.add_column(sa.Column("nonce", sa.String(length=255), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("authorization_codes", schema=None) as batch_op:
        batch_op.drop_column("nonce")
