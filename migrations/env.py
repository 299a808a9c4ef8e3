"""alembic environment: runs migrations on the connection the registry passes in.

It imports nothing from jaxport: the registry hands in the connection and the models' MetaData
through ``config.attributes`` (``jaxport.migrations.alembic_config``).
"""

from __future__ import annotations

from alembic import context

connection = context.config.attributes.get("connection")
if connection is None:
    raise RuntimeError("jaxport migrations run on a connection given by jaxport.Registry")
target_metadata = context.config.attributes.get("target_metadata")


def _include_name(name: str | None, type_: str, _parents: object) -> bool:
    """procrastinate's tables (the audit queue's, ``jaxport db upgrade``) are not jaxport's."""
    return not (type_ == "table" and (name or "").startswith("procrastinate_"))


context.configure(
    connection=connection,
    target_metadata=target_metadata,
    include_name=_include_name,
    render_as_batch=connection.dialect.name == "sqlite",
    compare_type=True,
)
with context.begin_transaction():
    context.run_migrations()
