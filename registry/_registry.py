"""``Registry``: the one facade of a jaxport registry, over a backend (``registry/_backend.py``).

Argument checks, the local-platform default (``LOCAL_PLATFORM``), the signature policy and the
rules of resolve, pull and variant choice are written here, once; ``SqlBackend``
(``registry/_sql.py``: SQLite or PostgreSQL and a blob store, in this process) and
``HttpBackend`` (``registry/_http_backend.py``: a registry server) do the work. The writes,
the audits and retention are mixins of their own (``_registry_writes.py``,
``_registry_audits.py``, ``_registry_retention.py``).

Importing this module loads neither jax nor SQLAlchemy: a registry server's client loads
SQLAlchemy never, and jax only to build an ``Exported`` or ``Model``.
"""

from __future__ import annotations

import builtins
import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from jaxport import InvalidNameError, NotFoundError, WrongKindError
from jaxport._extras import require
from jaxport.registry._backend import Backend, TokenStore
from jaxport.registry._compiled_types import CompiledPolicy
from jaxport.registry._config import TOKEN_ENV, RegistryConfig, is_server_url
from jaxport.registry._events import Event
from jaxport.registry._lineage import Lineage
from jaxport.registry._names import (
    check_allowlist,
    check_count,
    check_digest,
    check_name,
    check_version,
    parse_reference,
)
from jaxport.registry._platforms import LOCAL_PLATFORM, chosen_platform
from jaxport.registry._registry_audits import RegistryAudits
from jaxport.registry._registry_compiled import RegistryCompiled
from jaxport.registry._registry_gates import RegistryGates
from jaxport.registry._registry_oci import RegistryOci
from jaxport.registry._registry_rescue import RegistryRescue
from jaxport.registry._registry_retention import RegistryRetention
from jaxport.registry._registry_watch import RegistryWatch
from jaxport.registry._registry_writes import RegistryWrites
from jaxport.registry._signatures import SignaturePolicy, alias_of
from jaxport.registry._types import AliasMove, Ref, Resolution, VariantInfo, nothing_matches

if TYPE_CHECKING:
    from jax.export import Exported

    from jaxport.export import ArchiveInfo, Model
    from jaxport.registry._blobs import BlobStore
    from jaxport.registry._streams import BlobStream

__all__ = ["Registry"]

#: How to get a variant's archive, in Python and on the command line (``_cli/output.CLI_WORDS``).
_ARCHIVE_CALLS = "Registry.pull_bytes or `jaxport pull`"


class Registry(
    RegistryWrites,
    RegistryAudits,
    RegistryRetention,
    RegistryWatch,
    RegistryGates,
    RegistryRescue,
    RegistryCompiled,
    RegistryOci,
):
    """A registry of exported JAX functions and models: a SQL database and a content-addressed
    blob store, used directly or through a registry server (``jaxport serve``).

    Examples::

        reg = jaxport.Registry()                                     # embedded default
        reg = jaxport.Registry("sqlite:///reg.db", blobs="blobs/")
        reg = jaxport.Registry("postgresql+psycopg://host/db", blobs="s3://bucket/prefix")
        reg = jaxport.Registry("https://registry.example.com", token="jxp_...")
        ref = reg.push(exp, "mlp", aliases=["prod"])
        exp = reg.pull("mlp@prod")

    The same methods, results and typed errors whichever the URL; a registry server adds
    ``PermissionDeniedError`` (what its token may not do), and what needs the database or
    the blob store in this process (signing, signature policies, the audit queue, audits in
    another environment, upgrade reports, ``blob_stream``, ``receive_blob``, ``push_parts``)
    raises ``UnsupportedFeatureError`` through it.

    Args:
        url: a SQLAlchemy database URL (``sqlite:///...``, ``postgresql+psycopg://...``) or a
            registry server's ``http(s)://`` URL. Default: ``$JAXPORT_REGISTRY``, else SQLite
            at ``default_home() / "registry.db"`` (``registry/_config.py``).
        blobs: a directory or fsspec URL for the archives. Default: ``$JAXPORT_BLOBS``, else
            ``blobs/`` beside a SQLite database file; required for other databases. Not with
            a server (it holds its own).
        storage_options: fsspec options of a blob store at a URL (s3fs: ``endpoint_url``,
            ``key``, ``secret``, ``token``, ``client_kwargs``, ...). Default:
            ``$JAXPORT_BLOBS_OPTIONS`` (a JSON object), else none: s3fs then reads the
            ``AWS_*`` environment variables and ``~/.aws``. Not with a server.
        upgrade: upgrade an older database schema to this jaxport's (alembic). Not with a
            server.
        require_signatures: a ``SignaturePolicy``: pulls and alias moves of versions its keys
            did not sign raise ``SignatureError`` (``jaxport[signing]``). Not through a
            server (``UnsupportedFeatureError``).
        compiled: a ``CompiledPolicy``: every pull writes the compiled executables its keys
            signed for this host into jax's cache (``use_compiled``; ``Registry.compile``).
            Default: ``$JAXPORT_USE_COMPILED`` with ``$JAXPORT_COMPILED_KEYS``, else none (a
            pull never uses compiled executables unless asked).
        token: for a registry server only: its bearer token (default ``$JAXPORT_TOKEN``).
        timeout: for a registry server only: seconds one request may wait (uploads and audits
            included).

    Attributes:
        url: the database or server URL with any password masked (``user:***@``); the real
            one is used to connect and kept nowhere public.
        blobs: the ``BlobStore`` (its ``url`` masked the same way); None through a server.
        tokens: the registry server's bearer tokens: ``create``, ``list``, ``revoke`` (through
            a server: scope ``admin``).
        require_signatures: the ``SignaturePolicy`` given, or None.

    Raises:
        SchemaVersionError: the database's schema is older and ``upgrade`` is False.
        RegistryError: the database cannot be reached, a bad URL (shown without its
            password), no blob store for a server database, a missing fsspec package,
            storage options for a local directory or not a JSON object.
        InvalidNameError: ``token`` or ``timeout`` for a database; ``blobs``,
            ``storage_options`` or ``upgrade`` for a server.
        MissingExtraError: a server URL without httpx (``jaxport[client]``).
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        blobs: str | os.PathLike[str] | BlobStore | None = None,
        storage_options: Mapping[str, object] | None = None,
        upgrade: bool = False,
        require_signatures: SignaturePolicy | None = None,
        compiled: CompiledPolicy | None = None,
        token: str | None = None,
        timeout: float | None = None,
    ):
        if require_signatures is not None and not isinstance(require_signatures, SignaturePolicy):
            raise InvalidNameError("require_signatures must be a jaxport.SignaturePolicy or None")
        if compiled is not None and not isinstance(compiled, CompiledPolicy):
            raise InvalidNameError("compiled must be a jaxport.CompiledPolicy or None")
        self.compiled = compiled
        url = url or RegistryConfig.from_env().url
        self._backend = _backend(url, blobs, storage_options, upgrade, token, timeout)
        self.require_signatures = require_signatures
        if require_signatures is not None and self._backend.blobs is None:
            self._backend.close()
            self._backend.lacks("a signature policy (require_signatures)")
        self.url: str = self._backend.url
        self.blobs: BlobStore | None = self._backend.blobs
        self.tokens: TokenStore = self._backend.tokens

    def close(self) -> None:
        """Releases the database or server connections."""
        self._backend.close()

    def __enter__(self) -> Registry:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        if self.blobs is None:
            return f"Registry({self.url!r})"
        return f"Registry({self.url!r}, blobs={self.blobs.url!r})"

    # -- reading ----------------------------------------------------------------------------

    def resolve(
        self,
        reference: str,
        *,
        version: int | None = None,
        platform: Any = LOCAL_PLATFORM,
        nr_devices: int | None = None,
    ) -> Resolution:
        """Chooses the variant ``pull`` would return, without downloading anything.

        The newest version (or the one ``version``, ``NAME:N`` or ``NAME@ALIAS`` names) with a
        variant that runs on ``platform`` with ``nr_devices``; within it, an exact device
        count beats a 1-device unsharded export (jax's call-time rule, ``_rules``). Every
        variant not chosen, in that version and newer ones, is listed with the reason. A
        ``sha256:PREFIX`` reference names one variant exactly: it is chosen whatever the
        local platform, unless ``platform`` or ``nr_devices`` is given and it does not run
        there.

        Args:
            reference: ``NAME``, ``NAME:VERSION``, ``NAME@ALIAS`` or ``sha256:PREFIX``.
            version: a version number (instead of one in ``reference``).
            platform: ``cpu``, ``cuda``, ``rocm``, ``tpu`` (any case) or ``gpu`` (the local
                GPU kind); default ``LOCAL_PLATFORM``, the local jax backend's
                (``registry/_platforms.py``: known without importing jax on a machine
                without accelerator plugins); None: any.
            nr_devices: the device count to run on; None: any.

        Raises:
            NotFoundError: no such name, version, alias or digest.
            InvalidNameError: a malformed reference, platform or count.
        """
        if version is not None:
            reference = f"{check_name(reference)}:{check_version(version)}"
        parse_reference(reference)
        if platform is LOCAL_PLATFORM and reference.startswith("sha256:"):
            platform = None
        return self._backend.resolve(reference, chosen_platform(platform), nr_devices)

    def pull(
        self,
        reference: str,
        *,
        version: int | None = None,
        platform: Any = LOCAL_PLATFORM,
        nr_devices: int | None = None,
        allow_custom_calls: Sequence[str] = (),
        method: str | None = None,
        use_compiled: bool | CompiledPolicy | None = None,
    ) -> Exported:
        """The ``jax.export.Exported`` that ``resolve`` chooses, digest verified.

        ``method`` names one method of a model variant: its ``Exported``, which takes the
        parameter tree as its first argument (``method(params, *args)``), as
        ``pull_model(...).exported[method]`` gives it: only the model's skeleton is read, no
        tensor. A function archive from a direct registry is read whole (its modules share
        one section, checked before any is read), its VJPs' modules decompressed and vetted
        when ``.vjp()`` asks; through a registry server its header and primal module are
        fetched now and each VJP module, checked against its sha256, when ``.vjp()`` asks
        (an archive whose primal module is most of it, or an older server, is fetched whole).

        ``use_compiled`` (True, or a ``CompiledPolicy``; None: the registry's ``compiled``
        policy if any; False: never) first writes the variant's compiled executables that a
        trusted key signed for this host into jax's persistent compilation cache
        (``use_compiled``): a function's first ``jax.jit(exp.call)(...)`` then loads its
        executable instead of compiling. What was not used is a ``CompiledFallbackWarning``
        saying why; the report is ``last_compiled_use``.

        Raises:
            NotFoundError: nothing matches; the message lists the versions, platforms and
                device counts that exist; or the model has no such ``method`` (the message
                lists its methods).
            WrongKindError: the variant is a model and no ``method`` is given (use
                ``pull_model``), or a function and one is.
            IntegrityError: the blob is missing or does not match its digest; nothing is
                returned.
            SignatureError: under ``require_signatures``, the variant is not signed as the
                registry's keys (or, through ``NAME@ALIAS``, the alias's rule) require.
            (and see ``resolve`` and ``jaxport.loads``)
        """
        chosen = self._signed(reference, version, platform, nr_devices)
        where = f"{chosen.name}:{chosen.version}"
        if chosen.kind == "model":
            if method is None:
                raise WrongKindError(
                    f"{where} is a model: use Registry.pull_model or `jaxport run`, or pull one "
                    f"method with method= (its archive: {_ARCHIVE_CALLS})",
                    found="model",
                )
            model = self._backend.model(chosen, check_allowlist(allow_custom_calls))
            if method not in model.exported:
                raise NotFoundError(
                    f"{where} has no method {method!r}: it has {', '.join(model.exported)}"
                )
            exported: Exported = model.exported[method]
            self._use_compiled(chosen, method, use_compiled)
            return exported
        if method is not None:
            raise WrongKindError(
                f"{where} is a function, not a model: it has no method {method!r}",
                found=chosen.kind,
            )
        exp = self._backend.function(reference, chosen, check_allowlist(allow_custom_calls))
        self._use_compiled(chosen, None, use_compiled)
        return exp

    def pull_model(
        self,
        reference: str,
        *,
        version: int | None = None,
        platform: Any = LOCAL_PLATFORM,
        nr_devices: int | None = None,
        allow_custom_calls: Sequence[str] = (),
        use_compiled: bool | CompiledPolicy | None = None,
    ) -> Model:
        """The ``jaxport.Model`` of the variant ``resolve`` chooses (same references and
        variant choice as ``pull``).

        Only the skeleton (header and modules) is read now, verified; each tensor is read when
        the model first uses it and checked against its sha256 before any array is made:
        ``.exported["m"]`` reads no tensor, a method call reads only the tensors that method
        uses (``Model.bytes_read``: their bytes, decompressed where stored with zstd). From a
        direct registry a tensor's blob is memory-mapped from a local blob store, fetched from
        another; through a registry server it is fetched then (a presigned GET of its part
        where the server's store signs URLs, else an HTTP range of the archive through the
        server; ``registry/_remote_reads.py``). The blobs must stay until the tensors are read
        (``gc`` removes those of deleted versions; the version's deletion then shows as an
        ``IntegrityError`` at first use); through a server each first use is a request, and
        the registry should stay open until then (after ``close`` a tensor's read may raise
        ``RegistryError``).

        Args:
            reference, version, platform, nr_devices: as ``pull``.
            allow_custom_calls: as ``pull``.
            use_compiled: as ``pull``: every method's compiled executables for this host, when
                a trusted key signed them (the first call of each then loads, not compiles).

        Raises:
            NotFoundError: nothing matches (see ``pull``), or the version was deleted meanwhile.
            WrongKindError: the variant is a function: use ``pull``.
            IntegrityError: the skeleton is missing or corrupt; later, when a tensor is used,
                its blob is missing or does not match its digest (no array is returned).
            ServerUnavailableError: through a server, it cannot be reached (now, or when a
                tensor is first used).
            SignatureError: see ``pull``; under a policy a model's parts are read once to check
                that they make the archive signed.
            (and see ``resolve`` and ``jaxport.loads_model``)
        """
        chosen = self._signed(reference, version, platform, nr_devices)
        if chosen.kind != "model":
            raise WrongKindError(
                f"{chosen.name}:{chosen.version} is a function, not a model: use Registry.pull "
                f"(its archive: {_ARCHIVE_CALLS})",
                found=chosen.kind,
            )
        model = self._backend.model(chosen, check_allowlist(allow_custom_calls))
        model._origin = (self.url, f"{chosen.name}:{chosen.version}")  # lineage: update_params
        self._use_compiled(chosen, None, use_compiled)
        return model

    def pull_bytes(
        self,
        reference: str,
        *,
        version: int | None = None,
        platform: Any = LOCAL_PLATFORM,
        nr_devices: int | None = None,
    ) -> bytes:
        """The archive bytes of the variant ``resolve`` chooses, exactly as pushed, digest
        verified (see ``pull``): a model archive is put together from its parts, each verified.
        Under ``require_signatures``, a variant not signed as required raises ``SignatureError``.
        """
        chosen = self._signed(reference, version, platform, nr_devices)
        return self._backend.archive(reference, chosen)

    def pull_file(
        self,
        reference: str,
        path: str | os.PathLike[str],
        *,
        version: int | None = None,
        platform: Any = LOCAL_PLATFORM,
        nr_devices: int | None = None,
    ) -> VariantInfo:
        """Writes the archive ``pull_bytes`` gives to ``path``, atomically (a temporary file
        renamed over it): from a direct registry a model archive one part at a time, each
        verified (memory: its largest part; a function archive, one blob, is read whole);
        through a registry server streamed as it arrives (its parts straight from the
        server's store where it signs URLs), hashed on the way and renamed into place only
        once it matches its digest (memory: a few chunks of about 64 KiB, whatever the size).

        Returns:
            The variant written.

        Raises:
            OSError: the directory is missing or not writable.
            (and see ``pull_bytes``; on any error ``path`` is left as it was)
        """
        chosen = self._signed(reference, version, platform, nr_devices)
        self._backend.write_file(reference, chosen, path)
        return chosen

    def read_blob(self, digest: str) -> bytes:
        """A blob's bytes, verified against its digest; for the digest of a model archive (whose
        parts are the blobs), the archive put together from its parts.

        Raises:
            IntegrityError: the blob (or a part) is missing or corrupt.
            InvalidNameError: ``digest`` is not 64 lowercase hex digits.
            NotFoundError: through a registry server, it has no such blob.
        """
        return self._backend.read_blob(check_digest(digest))

    def inspect(
        self,
        reference: str,
        *,
        version: int | None = None,
        platform: Any = LOCAL_PLATFORM,
        nr_devices: int | None = None,
    ) -> ArchiveInfo:
        """``jaxport.inspect`` of the archive ``resolve`` chooses, from its preamble and header
        alone (read from the blob store, or through a registry server with HTTP range
        requests: those bytes only).

        Raises:
            NotFoundError: nothing matches (see ``pull``).
            CorruptArchiveError: a malformed header.
            (and see ``resolve``)
        """
        from jaxport.export._internal import ranged_info

        chosen = self._chosen(reference, version, platform, nr_devices)
        return ranged_info(self._backend.read_range(chosen.digest), chosen.size_bytes)

    def blob_stream(self, digest: str) -> BlobStream:
        """A blob, or the archive of a model variant with that digest, as a ``BlobStream``:
        its ``size`` in bytes and ``chunks(start, end)``, a whole read verified as it goes
        (``registry/_streams.py``; what ``jaxport serve`` sends).

        Raises:
            NotFoundError: no such blob or archive.
            InvalidNameError: ``digest`` is not 64 lowercase hex digits.
            UnsupportedFeatureError: through a registry server (use ``read_blob`` or
                ``pull_file``).
        """
        check_digest(digest)
        return self._backend.blob_stream(digest)

    def _chosen(
        self, reference: str, version: int | None, platform: Any, nr_devices: int | None
    ) -> VariantInfo:
        resolution = self.resolve(
            reference, version=version, platform=platform, nr_devices=nr_devices
        )
        if resolution.chosen is None:
            raise NotFoundError(nothing_matches(resolution))
        return resolution.chosen

    def _signed(
        self, reference: str, version: int | None, platform: Any, nr_devices: int | None
    ) -> VariantInfo:
        """``_chosen``, checked against ``require_signatures`` (the registry's keys, and the
        alias's rule for a ``NAME@ALIAS`` reference)."""
        chosen = self._chosen(reference, version, platform, nr_devices)
        if self.require_signatures is not None:
            alias = alias_of(reference) if version is None else None
            self._backend.check_signed(chosen, self.require_signatures.rules(alias))
        return chosen

    def get(self, reference: str) -> Ref:
        """The version ``NAME:VERSION``, ``NAME@ALIAS`` or ``sha256:PREFIX`` names; the newest
        for a bare ``NAME``. A model variant lists its ``methods`` and ``tensors``, read from
        its archive's header (``jaxport.inspect``).

        Raises:
            NotFoundError: no such name, version, alias or digest, or a name without versions.
            InvalidNameError: a malformed reference.
            IntegrityError: a model variant's skeleton blob is missing or its header corrupt.
        """
        parse_reference(reference)
        return self._backend.get(reference)

    def list(
        self, name: str | None = None, *, limit: int = 100, after: tuple[str, int] | None = None
    ) -> builtins.list[Ref]:
        """Versions in ``(name, version)`` order, one page (keyset pagination).

        Args:
            name: only this name's versions.
            limit: page size (1 .. 1,000,000).
            after: the ``(name, version)`` of the last item of the previous page.

        Raises:
            NotFoundError: ``name`` does not exist.
            InvalidNameError: a bad name, or ``after`` is not a (name, version) pair.
        """
        if name is not None:
            check_name(name)
        return self._backend.list(name, limit, after)

    def search(
        self,
        *,
        name: str | None = None,
        platform: str | None = None,
        nr_devices: int | None = None,
        jax_version: str | None = None,
        calling_convention_version: int | None = None,
        fun_name: str | None = None,
        shape_polymorphic: bool | None = None,
        limit: int = 100,
        after: int | None = None,
    ) -> builtins.list[VariantInfo]:
        """Variants matching every filter given, oldest first, one page (keyset pagination).

        ``platform`` is case-insensitive (``gpu``: the local GPU kind); ``nr_devices`` follows
        the device rule of ``resolve``; ``jax_version`` matches a release prefix (``"0.10"``
        matches 0.10.2); ``after`` is the ``variant_id`` of the last item of the previous page.
        """
        filters = {
            "name": name, "platform": platform, "nr_devices": nr_devices,
            "jax_version": jax_version, "calling_convention_version": calling_convention_version,
            "fun_name": fun_name, "shape_polymorphic": shape_polymorphic,
        }  # fmt: skip
        return self._backend.search(filters, limit, after)

    def names(self) -> builtins.list[str]:
        """Every name, sorted."""
        return self._backend.names()

    def aliases(self, name: str) -> dict[str, int]:
        """``name``'s aliases and the versions they point at.

        Raises:
            NotFoundError: no such name.
        """
        return self._backend.aliases(name)

    def alias_history(self, name: str, alias: str | None = None) -> builtins.list[AliasMove]:
        """The moves of ``name``'s aliases (or of one alias), oldest first.

        Raises:
            NotFoundError: no such name.
        """
        return self._backend.alias_history(name, alias)

    def events(
        self, *, name: str | None = None, limit: int = 100, before: int | None = None
    ) -> builtins.list[Event]:
        """The event log, newest first, one page: every push, alias move, delete, gc, signing
        and token change, with who made it (a token's name, or ``local:USER``).

        Args:
            name: only the events of this name.
            limit: events per page (1..10,000).
            before: the ``id`` of the last event of the previous page.

        Raises:
            InvalidNameError: a bad ``name``, ``limit`` or ``before``.
        """
        if name is not None:
            check_name(name)
        return self._backend.events(name, limit, before)

    def lineage(self, reference: str, *, depth: int | None = None) -> Lineage:
        """A version's lineage and provenance: the versions it derives from (its source, the
        source's source, ...), those derived from it (a tree), and where and by whom it was
        pushed (``registry/_lineage.py``). A deleted version in it reads as deleted; through a
        prefix-limited token, a source outside its names is hidden and descendants outside
        them are left out. At most 1,000 versions (``Lineage.truncated`` says when more).

        Args:
            reference: ``NAME:VERSION``, ``NAME@ALIAS``, ``sha256:PREFIX`` or ``NAME``.
            depth: at most this many levels each way (>= 1); None: all.

        Raises:
            NotFoundError: no such name, version, alias or digest.
            InvalidNameError: a malformed reference or ``depth``.
        """
        parse_reference(reference)
        if depth is not None:
            check_count(depth, "depth", 1000)
        return self._backend.lineage(reference, depth)


def _backend(
    url: str | None,
    blobs: Any,
    storage_options: Mapping[str, object] | None,
    upgrade: bool,
    token: str | None,
    timeout: float | None,
) -> Backend:
    """The backend ``url`` names: a registry server for ``http(s)://``, else a database.

    Raises:
        InvalidNameError: arguments of the other kind (see ``Registry``).
        MissingExtraError: a server URL without httpx.
    """
    if url is not None and is_server_url(url):
        if blobs is not None or storage_options is not None or upgrade:
            raise InvalidNameError(
                "a registry server holds its own blob store and schema: give it only a URL "
                "and a token (blobs=, storage_options= and upgrade= are for a database)"
            )
        require("httpx", "a registry server's client (an http(s):// registry URL)")
        from jaxport.registry._http_backend import HttpBackend

        secret = token if token is not None else os.environ.get(TOKEN_ENV) or None
        return HttpBackend(url, secret, 300.0 if timeout is None else timeout)
    if token is not None or timeout is not None:
        raise InvalidNameError("token and timeout are for a registry server (an http(s):// URL)")
    from jaxport.registry._sql import SqlBackend

    return SqlBackend(url, blobs, storage_options, upgrade)
