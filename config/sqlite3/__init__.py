"""The SQLite backend of `make run` (see base.py)."""
