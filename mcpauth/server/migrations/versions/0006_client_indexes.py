"""indexes on grants.client_id and refresh_tokens.client_id (pruning and deleting clients)

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-23 01:20:00
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index(op.f("ix_grants_client_id"), "grants", ["client_id"], unique=False)
    op.create_index(
        op.f("ix_refresh_tokens_client_id"), "refresh_tokens", ["client_id"], unique=False
    )


def downgrade() -> None:
    op.drop_index(op.f("ix_refresh_tokens_client_id"), table_name="refresh_tokens")
    op.drop_index(op.f("ix_grants_client_id"), table_name="grants")
