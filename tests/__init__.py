"""mcpauth's tests.

freezegun normally lets code running under ``threading``/``queue`` frames see the real clock;
the server does its work in executor threads, which must see the frozen clock too. The
PostgreSQL driver and the test database pool keep the real clock: a frozen test moving time by
minutes must not time out their connections in the background."""

import freezegun
import freezegun.config

freezegun.configure(
    default_ignore_list=[
        *(n for n in freezegun.config.DEFAULT_IGNORE_LIST if n not in ("threading", "queue")),
        "psycopg",
        "tests.pg",
    ]
)
