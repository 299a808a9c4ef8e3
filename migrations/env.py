"""alembic environment: runs migrations on the connection the registry passes in."""

from __future__ import annotations

from alembic import context

from jaxport.registry._models import Base

connection = context.config.attributes.get("connection")
if connection is None:
    raise RuntimeError("jaxport migrations run on a connection given by jaxport.Registry")

context.configure(
    connection=connection,
    target_metadata=Base.metadata,
    render_as_batch=connection.dialect.name == "sqlite",
    compare_type=True,
)
with context.begin_transaction():
    context.run_migrations()
