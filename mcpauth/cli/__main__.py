"""``python -m mcpauth.cli``: the same as the ``mcpauth`` command."""

import sys

from mcpauth.cli import main

sys.exit(main())
