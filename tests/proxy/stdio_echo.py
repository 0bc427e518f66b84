"""A tiny MCP-ish stdio server for the bridge tests: answers ``initialize`` and echoes every
other request's method; records its pid (named after ``MCPAUTH_SUBJECT``) in ``$ECHO_PID_DIR``
and exits when its stdin closes."""

import json
import os
import sys
from pathlib import Path

pid_dir = os.environ.get("ECHO_PID_DIR")
if pid_dir:
    Path(pid_dir, str(os.getpid())).write_text(os.environ.get("MCPAUTH_SUBJECT", ""))

for line in sys.stdin:
    message = json.loads(line)
    if "id" not in message or "method" not in message:
        continue
    if message["method"] == "initialize":
        result = {
            "protocolVersion": message["params"]["protocolVersion"],
            "capabilities": {},
            "serverInfo": {"name": "echo", "version": "0"},
        }
    else:
        result = {"echo": message["method"]}
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result}) + "\n")
    sys.stdout.flush()
