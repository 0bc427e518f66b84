"""The admin console: users.is_admin and users.disabled, clients.disabled, and audit_events (the audit log kept for its search,
pruned after audit_retention)

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-26 23:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("users", schema=None) as batch_op:
        for column in ("is_admin", "disabled"):
            batch_op.add_column(
                sa.Column(column, sa.Boolean(), nullable=False, server_default=sa.false())
            )
    with op.batch_alter_table("clients", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("disabled", sa.Boolean(), nullable=False, server_default=sa.false())
        )
    op.create_table(
        "audit_events",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("at", sa.Integer(), nullable=False),
        sa.Column("event", sa.String(length=64), nullable=False),
        sa.Column("user_id", sa.String(length=64), nullable=False),
        sa.Column("username", sa.String(length=200), nullable=False),
        sa.Column("client_id", sa.String(length=2048), nullable=False),
        sa.Column("actor", sa.String(length=200), nullable=False),
        sa.Column("request_id", sa.String(length=64), nullable=False),
        sa.Column("details", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_audit_events")),
    )
    for column in ("at", "event", "user_id", "username", "client_id"):
        op.create_index(op.f(f"ix_audit_events_{column}"), "audit_events", [column])


def downgrade() -> None:
    for column in ("at", "event", "user_id", "username", "client_id"):
        op.drop_index(op.f(f"ix_audit_events_{column}"), table_name="audit_events")
    op.drop_table("audit_events")
    with op.batch_alter_table("clients", schema=None) as batch_op:
        batch_op.drop_column("disabled")
    with op.batch_alter_table("users", schema=None) as batch_op:
        batch_op.drop_column("disabled")
        batch_op.drop_column("is_admin")
