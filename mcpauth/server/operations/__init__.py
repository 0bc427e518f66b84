"""Running the server: size limits, rate limits, lockout after repeated failures, logs and audit
events, metrics."""
