"""mcpauth's tests.

freezegun normally lets code running under ``threading``/``queue`` frames see the real clock;
the server does its work in executor threads, which must see the frozen clock too."""

import freezegun
import freezegun.config

freezegun.configure(
    default_ignore_list=[
        name for name in freezegun.config.DEFAULT_IGNORE_LIST if name not in ("threading", "queue")
    ]
)
