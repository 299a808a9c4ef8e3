"""What jaxport's own packages (the server, the CLI) use of the registry beyond its public
names: the one private module of ``jaxport.registry`` another package may import
(``tests/test_layering.py``). Anything here may change between releases.

- ``sql_backend``: a direct registry's ``SqlBackend`` (``registry/_sql.py``), for what only the
  registry server does with it: its tokens' ``authenticate`` and ``within=`` checks, what a
  prefix-limited token ``reach``-es, the names holding a blob, the event ``listeners``.
- The pushes in parts a server receives: ``ArchiveParts``, ``plan_parts``,
  ``sweep_commit_dirs``; golden examples as a server reads them.
- The wire format of results (``to_wire``, ``from_wire``); the actor a request's events
  name (``acting_as``, ``current_actor``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from jaxport import UnsupportedFeatureError
from jaxport.registry._events import acting_as, current_actor
from jaxport.registry._golden import MAX_EXAMPLES_BYTES, examples_from_blob
from jaxport.registry._uploads import ArchiveParts, plan_parts
from jaxport.registry._wire import from_wire, to_wire
from jaxport.registry._workdirs import sweep_commit_dirs

if TYPE_CHECKING:
    from jaxport.registry._registry import Registry
    from jaxport.registry._sql import SqlBackend

__all__ = [
    "MAX_EXAMPLES_BYTES",
    "ArchiveParts",
    "acting_as",
    "current_actor",
    "examples_from_blob",
    "from_wire",
    "plan_parts",
    "sql_backend",
    "sweep_commit_dirs",
    "to_wire",
]


def sql_backend(registry: Registry) -> SqlBackend:
    """The ``SqlBackend`` under a direct ``registry``.

    Raises:
        UnsupportedFeatureError: ``registry`` is a registry server's client (a server serves
            a database, never another server).
    """
    from jaxport.registry._sql import SqlBackend

    backend = registry._backend
    if not isinstance(backend, SqlBackend):
        raise UnsupportedFeatureError(
            f"a registry server serves a database registry, not {registry.url}"
        )
    return backend
