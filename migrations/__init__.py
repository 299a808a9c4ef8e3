"""alembic migrations of the registry database (issue #3)."""

__all__: list[str] = []
