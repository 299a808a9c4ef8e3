"""Where the registry lives: the environment variables, read once, for the library and the CLI.

    JAXPORT_REGISTRY   database URL (SQLAlchemy), e.g. ``postgresql+psycopg://host/db``
    JAXPORT_BLOBS      blob store: a directory or an fsspec URL (``s3://bucket/prefix``)
    JAXPORT_BLOBS_OPTIONS  fsspec storage options of a blob store at a URL: a JSON object
                       (``{"endpoint_url": "https://minio:9000", "key": ..., "secret": ...}``)
    JAXPORT_HOME       directory of the embedded default registry
    JAXPORT_TOKEN      a registry server's bearer token (for an ``http(s)://`` registry URL)
    XDG_DATA_HOME      used when JAXPORT_HOME is unset: ``$XDG_DATA_HOME/jaxport``

Without them the registry is SQLite at ``~/.local/share/jaxport/registry.db`` with its blobs in
``blobs/`` beside it. Importing this module imports neither SQLAlchemy nor jax (the CLI's
``--help`` reads it).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from collections.abc import Mapping
from pathlib import Path

from jaxport import RegistryError

__all__ = [
    "BLOBS_ENV",
    "BLOBS_OPTIONS_ENV",
    "HOME_ENV",
    "TOKEN_ENV",
    "URL_ENV",
    "RegistryConfig",
    "check_sqlite_directory",
    "default_blobs",
    "default_home",
    "default_url",
    "is_fsspec_url",
    "is_server_url",
    "safe_url",
    "sqlite_file",
]

# SQLAlchemy's URL grammar (sqlalchemy.engine.url._parse_url): user, then ":" and a password
# running to the "@" (also after an fsspec chain's "::", ``simplecache::s3://key:secret@b``);
# and query parameters that carry secrets: libpq's password, fsspec and cloud tokens, keys and
# signatures (``?token=``, ``X-Amz-Signature``, ``X-Amz-Credential``, Azure's ``sig``).
_USERINFO = re.compile(r"([\w+.\-]+://[^:/@]*:)[^@]*@")
_QUERY_SECRET = re.compile(
    r"([?&][^=&#]*(?:pass|pwd|secret|token|key|sig|credential)[^=&#]*=)[^&#]*", re.IGNORECASE
)

#: Environment variable: the database URL of the default registry.
URL_ENV = "JAXPORT_REGISTRY"
#: Environment variable: the blob store (directory or fsspec URL) of the default registry.
BLOBS_ENV = "JAXPORT_BLOBS"
#: Environment variable: the storage options (a JSON object) of a blob store at an fsspec URL.
BLOBS_OPTIONS_ENV = "JAXPORT_BLOBS_OPTIONS"
#: Environment variable: the directory of the embedded default registry.
HOME_ENV = "JAXPORT_HOME"
#: Environment variable: a registry server's bearer token, when none is given.
TOKEN_ENV = "JAXPORT_TOKEN"


@dataclasses.dataclass(frozen=True)
class RegistryConfig:
    """The environment's registry settings (None where unset).

    Attributes:
        url: ``$JAXPORT_REGISTRY``.
        blobs: ``$JAXPORT_BLOBS``.
        home: the embedded registry's directory (``default_home``).
        blobs_options: ``$JAXPORT_BLOBS_OPTIONS`` as given (JSON text, read by
            ``storage_options``); left out of ``repr``, since it may hold keys.
    """

    url: str | None
    blobs: str | None
    home: Path
    blobs_options: str | None = dataclasses.field(default=None, repr=False)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> RegistryConfig:
        """Reads the variables once from ``environ`` (default ``os.environ``)."""
        env = os.environ if environ is None else environ
        return cls(
            env.get(URL_ENV) or None,
            env.get(BLOBS_ENV) or None,
            default_home(env),
            env.get(BLOBS_OPTIONS_ENV) or None,
        )

    def database_url(self) -> str:
        """``url``, else SQLite at ``home / "registry.db"`` (nothing is created here: a
        direct ``Registry`` creates the embedded default's directory when it opens it)."""
        if self.url:
            return self.url
        return self.default_database_url()

    def default_database_url(self) -> str:
        """The embedded default: SQLite at ``home / "registry.db"``."""
        return f"sqlite:///{self.home.absolute() / 'registry.db'}"

    def blob_location(self, url: str) -> str | Path:
        """``blobs``, else ``default_blobs(url)``."""
        return self.blobs or default_blobs(url, self.home)

    def storage_options(self, location: object) -> dict[str, object] | None:
        """``blobs_options`` read as a JSON object, for a blob store at an fsspec URL
        (``location``, e.g. ``s3://bucket/prefix``); None when unset, and for a local directory,
        a ``file://`` URL or a ``BlobStore`` object (which take no storage options).

        Raises:
            RegistryError: ``$JAXPORT_BLOBS_OPTIONS`` is not a JSON object (the message does
                not show it: it may hold keys).
        """
        if self.blobs_options is None or not is_fsspec_url(location):
            return None
        try:
            options = json.loads(self.blobs_options)
        except json.JSONDecodeError as e:  # where, not what: the text may hold keys
            raise RegistryError(
                f"{BLOBS_OPTIONS_ENV} is not valid JSON: {e.msg} at line {e.lineno} column "
                f"{e.colno}"
            ) from None
        if not isinstance(options, dict):
            raise RegistryError(
                f"{BLOBS_OPTIONS_ENV} must be a JSON object of fsspec storage options, "
                f'such as {{"endpoint_url": "https://host:9000"}}: got a {type(options).__name__}'
            )
        return options


def is_fsspec_url(location: object) -> bool:
    """Whether a blob store ``location`` is an fsspec URL other than ``file://``: a ``str``
    with ``://`` in it (a local path, a ``PathLike`` or a ``BlobStore`` is not)."""
    return isinstance(location, str) and "://" in location and not location.startswith("file://")


def default_home(environ: Mapping[str, str] | None = None) -> Path:
    """``$JAXPORT_HOME``, else ``$XDG_DATA_HOME/jaxport``, else ``~/.local/share/jaxport``."""
    env = os.environ if environ is None else environ
    if home := env.get(HOME_ENV):
        return Path(home)
    data = env.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(data) / "jaxport"


def default_url() -> str:
    """``$JAXPORT_REGISTRY``, else SQLite at ``default_home() / "registry.db"``."""
    return RegistryConfig.from_env().database_url()


def is_server_url(url: object) -> bool:
    """Whether ``url`` names a registry server (``http://`` or ``https://``), not a
    database."""
    return isinstance(url, str) and url.lower().startswith(("http://", "https://"))


def sqlite_file(url: str) -> Path | None:
    """The absolute path of the database file a SQLite URL names (relative paths are read
    from the working directory, as SQLite does); None for another database, an in-memory
    one or a ``file:`` URI (``?uri=true``, which SQLite resolves itself).

    Raises:
        RegistryError: ``url`` is not a URL SQLAlchemy can parse (shown without secrets).
    """
    if not url.lower().startswith("sqlite"):
        return None
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        parsed = make_url(url)
    except ArgumentError:
        raise RegistryError(f"not a database URL: {safe_url(url)}") from None
    database = parsed.database
    if not database or database == ":memory:" or parsed.query.get("uri") == "true":
        return None
    return Path(database).expanduser().absolute()


def default_blobs(url: str, home: Path | None = None) -> Path:
    """The blob directory of a SQLite registry: ``blobs/`` beside its database file.

    Raises:
        RegistryError: ``url`` is not SQLite: a server database needs ``blobs=`` given.
    """
    if url.startswith("sqlite:///") and url != "sqlite:///:memory:":
        path = url.removeprefix("sqlite:///").split("?", 1)[0]
        return Path(path).resolve().parent / "blobs"
    if url.startswith("sqlite"):
        return (home or default_home()) / "blobs"
    scheme = url.split(":", 1)[0]
    raise RegistryError(
        f"a registry on {scheme} needs a blob store: pass blobs= (a directory or an fsspec "
        f"URL such as s3://bucket/prefix) or set {BLOBS_ENV}"
    )


def safe_url(url: str) -> str:
    """``url`` with its credentials shown as ``***``: the password (``user:PASSWORD@``, as
    SQLAlchemy's ``render_as_string(hide_password=True)`` hides it) and every query parameter
    named like a secret (``password``, ``token``, ``key``, ``sig``, ...). For database URLs and
    fsspec URLs alike; imports nothing heavy, so the CLI's ``--help`` can show where the
    registry is."""
    return _QUERY_SECRET.sub(r"\1***", _USERINFO.sub(r"\1***@", url))


def check_sqlite_directory(url: str) -> Path | None:
    """The absolute path of a SQLite URL's database file (``sqlite_file``), once its directory
    is known to exist (SQLite itself would only say "unable to open database file").

    Raises:
        RegistryError: the directory does not exist; the message names the file's absolute
            path.
    """
    path = sqlite_file(url)
    if path is not None and not path.parent.is_dir():
        raise RegistryError(
            f"cannot open the SQLite registry {path}: its directory {path.parent} does not "
            "exist (create it first, or fix the URL: sqlite:///RELATIVE/PATH or "
            "sqlite:////ABSOLUTE/PATH)"
        )
    return path
