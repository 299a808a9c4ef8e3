"""The SQL-backed artifact registry (issue #3)."""

__all__: list[str] = []
