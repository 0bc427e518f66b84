"""Storage: the tables, the repositories that hold all SQL on them, migrations and pruning."""
