"""alembic migrations of the registry database, shipped inside the package.

``alembic_config(connection)`` gives a Config whose ``env.py`` runs on that connection;
``HEAD`` is the revision this jaxport writes. Add a migration with
``alembic -c <(python -m jaxport.migrations) revision --autogenerate -m "..."`` or by hand in
``versions/``, and keep ``tests/test_migrations.py``'s revision-1 fixture upgrading.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from alembic.config import Config

__all__ = ["HEAD", "SCRIPT_LOCATION", "alembic_config", "known_revisions"]

SCRIPT_LOCATION = str(Path(__file__).parent)
#: The schema revision this jaxport writes.
HEAD = "0017"


def alembic_config(connection: Any = None, target_metadata: Any = None) -> Config:
    """An alembic Config for this package's migrations, bound to ``connection`` if given;
    ``target_metadata`` (the models' MetaData) is what autogenerate compares with."""
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", SCRIPT_LOCATION)
    if connection is not None:
        config.attributes["connection"] = connection
    if target_metadata is not None:
        config.attributes["target_metadata"] = target_metadata
    return config


def known_revisions() -> set[str]:
    """Every revision this jaxport knows (older ones can be upgraded from)."""
    from alembic.script import ScriptDirectory

    script = ScriptDirectory.from_config(alembic_config())
    return {rev.revision for rev in script.walk_revisions()}
