"""Second factors: TOTP secrets, recovery codes, passkeys and half-finished sign-ins; the
authentication methods (RFC 8176 ``amr``) of a browser session and of a grant; and
resources.require_mfa

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-27 09:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("resources", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("require_mfa", sa.Boolean(), nullable=False, server_default=sa.false())
        )
    for table in ("grants", "browser_sessions"):
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.add_column(
                sa.Column("amr", sa.String(length=64), nullable=False, server_default="")
            )
    op.create_table(
        "totp_factors",
        sa.Column("user_id", sa.String(length=64), nullable=False),
        sa.Column("sealed", sa.Text(), nullable=False),
        sa.Column("confirmed_at", sa.Integer(), nullable=True),
        sa.Column("last_step", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("user_id", name=op.f("pk_totp_factors")),
    )
    op.create_table(
        "recovery_codes",
        sa.Column("digest", sa.String(length=64), nullable=False),
        sa.Column("user_id", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.Integer(), nullable=False),
        sa.Column("used_at", sa.Integer(), nullable=True),
        sa.PrimaryKeyConstraint("digest", name=op.f("pk_recovery_codes")),
    )
    op.create_index(op.f("ix_recovery_codes_user_id"), "recovery_codes", ["user_id"])
    op.create_table(
        "passkeys",
        sa.Column("credential_id", sa.String(length=1400), nullable=False),
        sa.Column("user_id", sa.String(length=64), nullable=False),
        sa.Column("public_key", sa.Text(), nullable=False),
        sa.Column("sign_count", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=100), nullable=False),
        sa.Column("created_at", sa.Integer(), nullable=False),
        sa.Column("last_used_at", sa.Integer(), nullable=True),
        sa.PrimaryKeyConstraint("credential_id", name=op.f("pk_passkeys")),
    )
    op.create_index(op.f("ix_passkeys_user_id"), "passkeys", ["user_id"])
    op.create_table(
        "pending_sign_ins",
        sa.Column("digest", sa.String(length=64), nullable=False),
        sa.Column("user_id", sa.String(length=64), nullable=False),
        sa.Column("amr", sa.String(length=64), nullable=False),
        sa.Column("interaction_id", sa.String(length=64), nullable=True),
        sa.Column("created_at", sa.Integer(), nullable=False),
        sa.Column("expires_at", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("digest", name=op.f("pk_pending_sign_ins")),
    )
    op.create_index(op.f("ix_pending_sign_ins_expires_at"), "pending_sign_ins", ["expires_at"])


def downgrade() -> None:
    op.drop_index(op.f("ix_pending_sign_ins_expires_at"), table_name="pending_sign_ins")
    op.drop_table("pending_sign_ins")
    op.drop_index(op.f("ix_passkeys_user_id"), table_name="passkeys")
    op.drop_table("passkeys")
    op.drop_index(op.f("ix_recovery_codes_user_id"), table_name="recovery_codes")
    op.drop_table("recovery_codes")
    op.drop_table("totp_factors")
    for table in ("browser_sessions", "grants"):
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.drop_column("amr")
    with op.batch_alter_table("resources", schema=None) as batch_op:
        batch_op.drop_column("require_mfa")
