"""One identity per issuer per account: a unique index on upstream_identities (user_id, issuer),
so two links started at once cannot both attach an identity of the same provider to one
account.

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-23 10:00:00
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index(
        "ix_upstream_identities_user_issuer",
        "upstream_identities",
        ["user_id", "issuer"],
        unique=True,
    )


def downgrade() -> None:
    op.drop_index("ix_upstream_identities_user_issuer", table_name="upstream_identities")
