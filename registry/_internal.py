"""What jaxport's own packages (the server, the CLI, the migrations) use of the registry beyond
its public names: the one private module of ``jaxport.registry`` another package may import
(``tests/test_layering.py``). Nothing here is API: any name may change between releases.

- ``sql_backend``: a direct registry's ``SqlBackend`` (``registry/_sql.py``), for what only the
  registry server does with it: its tokens' ``authenticate`` and ``within=`` checks, what a
  prefix-limited token ``reach``-es, the names holding a blob, the event ``listeners``.
- The pushes in parts a server receives: ``ArchiveParts``, ``plan_parts``,
  ``sweep_commit_dirs``; golden examples as a server reads them; the compiled sets it stores
  and serves (``store_sent``, ``sets_on_wire``, ``read_set_blob``) and their cap
  (``MAX_SET_FILES``, ``check_set_files``).
- The wire format of results (``to_wire``, ``from_wire``); the actor a request's events
  name (``acting_as``, ``current_actor``); the provenance a pushing client reports
  (``LIMITS``, ``check_provenance``, ``reported_provenance``) and the lineage a
  prefix-limited token sees (``visible``).
- The CLI's reading of its configuration (``RegistryConfig``, ``safe_url``, ``is_server_url``,
  ``sqlite_file``, ``check_sqlite_directory``), ``jaxport db`` (``schema_revision``,
  ``upgrade_database``), digests as the CLI prints them (``DIGEST_PREFIX``,
  ``SHORT_DIGEST_HEX``), a version's ``content_key`` (migration 0005), and retention's
  durations (``parse_duration``, ``format_duration``, ``DEFAULT_RESTORE_PERIOD``), and
  ``jaxport oci pull -o``'s ``oci_pull_file`` (a variant to a file, no registry). These load
  on first use (``jaxport._lazy``): importing this module imports no SQLAlchemy for them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from jaxport import UnsupportedFeatureError
from jaxport._lazy import attach, isort_key
from jaxport.registry._events import acting_as as acting_as
from jaxport.registry._events import current_actor as current_actor
from jaxport.registry._golden import MAX_EXAMPLES_BYTES as MAX_EXAMPLES_BYTES
from jaxport.registry._golden import examples_from_blob as examples_from_blob
from jaxport.registry._lineage import LIMITS as LIMITS
from jaxport.registry._lineage import check_provenance as check_provenance
from jaxport.registry._lineage import reported_provenance as reported_provenance
from jaxport.registry._uploads import ArchiveParts as ArchiveParts
from jaxport.registry._uploads import plan_parts as plan_parts
from jaxport.registry._wire import from_wire as from_wire
from jaxport.registry._wire import to_wire as to_wire
from jaxport.registry._workdirs import sweep_commit_dirs as sweep_commit_dirs

if TYPE_CHECKING:
    from jaxport.registry._adoption import MAX_FINDINGS as MAX_FINDINGS
    from jaxport.registry._compiled_served import read_set_blob as read_set_blob
    from jaxport.registry._compiled_served import sets_on_wire as sets_on_wire
    from jaxport.registry._compiled_served import store_sent as store_sent
    from jaxport.registry._compiled_types import MAX_SET_FILES as MAX_SET_FILES
    from jaxport.registry._compiled_types import check_set_files as check_set_files
    from jaxport.registry._config import RegistryConfig as RegistryConfig
    from jaxport.registry._config import check_sqlite_directory as check_sqlite_directory
    from jaxport.registry._config import is_server_url as is_server_url
    from jaxport.registry._config import safe_url as safe_url
    from jaxport.registry._config import sqlite_file as sqlite_file
    from jaxport.registry._db import schema_revision as schema_revision
    from jaxport.registry._db import upgrade_database as upgrade_database
    from jaxport.registry._lineage_store import visible as visible
    from jaxport.registry._names import DIGEST_PREFIX as DIGEST_PREFIX
    from jaxport.registry._publish import content_key as content_key
    from jaxport.registry._registry import Registry
    from jaxport.registry._registry_oci import oci_pull_file as oci_pull_file
    from jaxport.registry._retention_types import DEFAULT_RESTORE_PERIOD as DEFAULT_RESTORE_PERIOD
    from jaxport.registry._retention_types import format_duration as format_duration
    from jaxport.registry._retention_types import parse_duration as parse_duration
    from jaxport.registry._sql import SqlBackend
    from jaxport.registry._types import SHORT_DIGEST_HEX as SHORT_DIGEST_HEX

_names, __getattr__, __dir__ = attach(__name__)
__all__ = sorted([*_names, "sql_backend"], key=isort_key)


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
