"""``Registry``: the facade. Each method is one short delegation to the module that holds its
concept: ``_publish`` (push), ``_queries`` (resolve, get, list, search), ``_aliases``,
``_maintenance`` (delete, gc, verify), ``_findings`` (audits and their stored results),
``_model_parts`` (model archives stored as a skeleton and one blob per tensor), ``_signatures``
(signatures and the signature policy), ``_queue`` (the audit queue, on PostgreSQL)."""

from __future__ import annotations

import builtins
import dataclasses
import datetime
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from jaxport import (
    InvalidNameError,
    NotFoundError,
    SchemaVersionError,
    __version__,
)
from jaxport._extras import require
from jaxport._files import DEFAULT_MAX_READ
from jaxport.export import ranged_info
from jaxport.migrations import HEAD
from jaxport.registry import _db, _queue, _uploads, _workdirs
from jaxport.registry._aliases import Aliases
from jaxport.registry._blobs import BlobStore, open_blob_store
from jaxport.registry._config import (
    RegistryConfig,
    check_sqlite_directory,
    default_home,
    is_server_url,
    safe_url,
    sqlite_file,
)
from jaxport.registry._events import Event, EventLog
from jaxport.registry._findings import Findings
from jaxport.registry._maintenance import Maintenance
from jaxport.registry._names import (
    check_digest,
    check_name,
    check_seconds,
    check_timeout,
    check_version,
    normalize_platform,
    parse_reference,
)
from jaxport.registry._publish import Publisher, Source
from jaxport.registry._pulls import Pulls
from jaxport.registry._queries import Queries, nothing_matches
from jaxport.registry._queue import QueuedJob
from jaxport.registry._reach import Reach
from jaxport.registry._signatures import (
    Signature,
    SignatureCheck,
    SignaturePolicy,
    Signatures,
    alias_of,
)
from jaxport.registry._streams import BlobStream
from jaxport.registry._tokens import Tokens
from jaxport.registry._types import (
    AliasMove,
    GcReport,
    PushResult,
    Ref,
    Resolution,
    VariantInfo,
    VerifyReport,
)
from jaxport.registry._uploads import ArchiveParts
from jaxport.registry._windows import VariantWindow, expiring_date, variant_windows

if TYPE_CHECKING:
    from jax.export import Exported

    from jaxport.audit import Change, Example, Finding, UpgradeRow
    from jaxport.export import ArchiveInfo, Model

__all__ = ["Registry"]

_LOCAL: Any = object()  # "the local jax backend", the default platform of pull / resolve


class Registry:
    """A registry of exported JAX functions: a SQL database and a content-addressed blob store.

    Examples::

        reg = jaxport.Registry()                                     # embedded default
        reg = jaxport.Registry("sqlite:///reg.db", blobs="blobs/")
        reg = jaxport.Registry("postgresql+psycopg://host/db", blobs="s3://bucket/prefix")
        ref = reg.push(exp, "mlp", aliases=["prod"])
        exp = reg.pull("mlp@prod")

    Args:
        url: a SQLAlchemy database URL. Default: ``$JAXPORT_REGISTRY``, else SQLite at
            ``default_home() / "registry.db"`` (``registry/_config.py``).
        blobs: a directory or fsspec URL for the archives. Default: ``$JAXPORT_BLOBS``, else
            ``blobs/`` beside a SQLite database file; required for other databases.
        storage_options: fsspec options of a blob store at a URL (s3fs: ``endpoint_url``,
            ``key``, ``secret``, ``token``, ``client_kwargs``, ...). Default:
            ``$JAXPORT_BLOBS_OPTIONS`` (a JSON object), else none: s3fs then reads the
            ``AWS_*`` environment variables and ``~/.aws``.
        upgrade: upgrade an older database schema to this jaxport's (alembic).
        require_signatures: a ``SignaturePolicy``: pulls and alias moves of versions its keys
            did not sign raise ``SignatureError`` (``jaxport[signing]``).
        token: for a registry server (``http(s)://`` URL) only: its bearer token (default
            ``$JAXPORT_TOKEN``). A server URL gives a client with the same methods, results
            and errors (``registry/_remote.py``), plus ``PermissionDeniedError``.

    Attributes:
        url: the database URL with its password masked (``user:***@``); the real one is used
            to connect and kept nowhere public.
        blobs: the ``BlobStore`` (its ``url`` masked the same way).

    Raises:
        SchemaVersionError: the database's schema is older and ``upgrade`` is False.
        RegistryError: the database cannot be reached, a bad URL (shown without its
            password), no blob store for a server database, a missing fsspec package,
            storage options for a local directory or not a JSON object.
    """

    def __new__(cls, url: str | None = None, **kwargs: Any) -> Registry:
        """A ``RemoteRegistry`` (``registry/_remote.py``) for an ``http(s)://`` URL (given, or
        ``$JAXPORT_REGISTRY``), else a direct registry."""
        if cls is Registry and _remote_url(url):
            from jaxport.registry._remote import RemoteRegistry

            return super().__new__(RemoteRegistry)
        return super().__new__(cls)

    def __init__(
        self,
        url: str | None = None,
        *,
        blobs: str | os.PathLike[str] | BlobStore | None = None,
        storage_options: Mapping[str, object] | None = None,
        upgrade: bool = False,
        require_signatures: SignaturePolicy | None = None,
        token: str | None = None,
    ):
        if token is not None:
            raise InvalidNameError("token is for a registry server (an http(s):// URL)")
        if require_signatures is not None and not isinstance(require_signatures, SignaturePolicy):
            raise InvalidNameError("require_signatures must be a jaxport.SignaturePolicy or None")
        self.require_signatures = require_signatures
        config = RegistryConfig.from_env()
        url = url or config.database_url()
        _open_sqlite_directory(url, config)
        self.url = safe_url(url)  # the real URL stays in the engine
        location = blobs if blobs is not None else config.blob_location(url)
        if storage_options is None:
            storage_options = config.storage_options(location)
        self.blobs = open_blob_store(location, storage_options)
        self._engine = _db.create_registry_engine(url)
        try:
            with _db.translating_db_errors():
                self._writable = _db.ensure_schema(self._engine, upgrade_db=upgrade)
        except BaseException:
            self._engine.dispose()
            raise
        self._queries = Queries(self._engine)
        self._events = EventLog(self._engine)
        self._aliases = Aliases(self._engine, self._events)
        self._publisher = Publisher(self._engine, self.blobs, self._events)
        self._pulls = Pulls(self._engine, self.blobs, self._queries)
        self._maintenance = Maintenance(self._engine, self.blobs)
        self._findings = Findings(self._engine, self.blobs, self._queries, self._pulls)
        self._signatures = Signatures(self._engine, self.blobs, self._queries)
        #: The registry server's bearer tokens (``registry/_tokens.py``).
        self.tokens = Tokens(self._engine, self._events)
        #: What the server's prefix-limited tokens reach beyond their names (``_reach``).
        self._reach = Reach(self._engine)

    def close(self) -> None:
        """Releases the database connections."""
        self._engine.dispose()

    def __enter__(self) -> Registry:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Registry({self.url!r}, blobs={self.blobs.url!r})"

    # -- writing ----------------------------------------------------------------------------

    def push(
        self,
        source: Source | Sequence[Source],
        name: str | None = None,
        *,
        vjp_order: int = 0,
        aliases: Iterable[str] = (),
        metadata: Mapping[str, str] | None = None,
        examples: Sequence[Example | tuple[Any, ...]]
        | Mapping[str, Sequence[Example | tuple[Any, ...]]]
        | None = None,
        max_size: int = DEFAULT_MAX_READ,
        allow_custom_calls: Sequence[str] = (),
        tolerance: float | tuple[float, float] | Mapping[str, float] | None = None,
    ) -> PushResult:
        """Stores one artifact (or a list: the variants of one version) as a new version.

        A source is a ``jax.export.Exported``, a ``jaxport.Model``, the bytes of a jaxport
        archive (of a function or a model) or of jax's own ``Exported.serialize()`` (told
        apart by content), or a path to either. A jaxport archive is validated in full (a
        model's every method, VJP order and tensor digest) and stored verbatim (its digest is
        the file's sha256; ``pull_bytes`` gives the same bytes back). A model archive is stored
        in parts: each tensor's section (raw, or zstd as ``Model.save(compress=True)`` wrote
        it) is a blob of its own, shared by every version that holds the same bytes, so a
        version that changes one layer stores one new tensor; a ``jaxport.Model`` is stored
        raw, each tensor hashed and written from the model's own array (the archive is never
        joined in memory); jax-native bytes are converted once, keeping every VJP order they
        carry; an Exported is written with ``jaxport.dumps(exp, vjp_order=vjp_order)``.
        Pushing the same archives (and examples) again returns the existing version and
        rewrites any of its blobs that is missing or corrupt. A failed push leaves the
        registry as it was and consumes no version number; ``gc`` running beside it never
        deletes a blob it needs.

        Args:
            source: what to store (see above), or a list of them (one per platform or
                device count, say): all functions or all models.
            name: defaults to the first artifact's ``fun_name``; required for a model.
            vjp_order: VJP orders written with an ``Exported`` (archives and models keep
                their own).
            aliases: aliases to point at the version, e.g. ``["prod"]``.
            metadata: the version's user strings (never written into an archive).
            examples: golden examples that audits re-run: ``Example(args, kwargs, outputs)``
                or ``(args, kwargs)`` tuples; outputs left None are computed now by the first
                variant that runs here. For a model, ``{method: [Example(args), ...]}``: the
                method's own arguments, without the parameters.
            max_size: the largest file a path may name, in bytes (default 64 GiB); a path
                must name a regular file (not a FIFO or a device). Both are checked before a
                byte is read.
            allow_custom_calls: custom-call targets an archive's modules may call besides those
                some jax release guarantees stable (as ``jaxport.loads``), e.g. a Pallas Triton
                kernel's ``("__gpu$xla.gpu.triton",)``: only from authors you trust.
            tolerance: how far audits let the examples' outputs move, instead of the rule per
                dtype and output magnitude (``jaxport.audit._examples.tolerance``): a number
                (rtol = atol, as jax's ``assertAllClose(tol)``), ``(rtol, atol)`` or
                ``{"rtol": ..., "atol": ...}``; stored in the examples blob (so another
                tolerance is another version). Needs ``examples``.

        Returns:
            A ``PushResult``: the version's ``Ref``, whether it was created, notes (e.g. what
            jax's native format lost) and the digests of repaired blobs.

        Under ``require_signatures``, an alias with a rule is moved after the push, as
        ``alias`` moves it: a version just pushed is not signed yet, so that move is refused
        (``SignatureError``; the version stays): sign it, then move the alias.

        Raises:
            InvalidNameError: a bad name, alias, metadata entry or source type; functions and
                models in one version; a model without ``name``.
            NotFoundError: a path that does not exist.
            InvalidNameError: also a path that is not a regular file, or over ``max_size``.
            CorruptArchiveError: bytes that are neither a valid jaxport archive nor jax-native.
            IntegrityError: a digest of the archive (a model's tensor's, say) does not match.
            SchemaVersionError: the database is newer than this jaxport.
            UnsupportedFeatureError, UnsupportedVersionError: see ``jaxport.dumps``; examples
                with a model; a model archive not laid out as jaxport writes them.
        """
        self._check_writable()
        ruled: builtins.list[str] = []
        if self.require_signatures is not None and not isinstance(aliases, str):
            aliases = builtins.list(aliases)
            ruled = [a for a in aliases if isinstance(a, str) and self._alias_rules(a)]
            aliases = [a for a in aliases if a not in ruled]
        result = self._publisher.push(
            source, name, vjp_order=vjp_order, aliases=aliases, metadata=metadata,
            examples=examples, max_size=max_size, allow_custom_calls=allow_custom_calls,
            tolerance=tolerance,
        )  # fmt: skip
        for alias in ruled:
            self.alias(result.name, alias, result.version)
        return result

    # -- pushes in parts (registry/_uploads.py: the server's content-addressed uploads) ------

    def missing_blobs(self, digests: Sequence[str]) -> builtins.list[str]:
        """Of ``digests`` (archive parts), those the blob store does not hold, once each.

        Raises:
            InvalidNameError: a digest that is not 64 lowercase hex digits.
        """
        return _uploads.missing(self.blobs, digests)

    def receive_blob(
        self, digest: str, chunks: Iterable[bytes], *, max_size: int = DEFAULT_MAX_READ
    ) -> int:
        """Stores the part ``chunks`` make if its sha256 is ``digest``; returns its size in
        bytes. It is referred to by nothing until ``push_parts`` commits a version that uses
        it (``gc`` keeps it for ``min_age`` meanwhile).

        Raises:
            IntegrityError: the sha256 of the bytes is not ``digest``: nothing is stored.
            InvalidNameError: over ``max_size`` bytes, or a malformed digest.
        """
        self._check_writable()
        return _uploads.receive(self.blobs, digest, chunks, max_size)

    def push_parts(
        self, archives: Sequence[ArchiveParts], name: str | None = None, **push: Any
    ) -> PushResult:
        """``push`` of archives whose parts are stored already (``receive_blob``): each is put
        together from its parts (every part and the whole digest verified) into a temporary
        file and pushed as that file, with ``push``'s keywords.

        Raises:
            IntegrityError: a part is missing (``.expected`` names it) or corrupt, or the
                parts do not make the archive's digest.
            InvalidNameError: the parts are not the archive's layout (``_uploads.plan_parts``).
            (and see ``push``)
        """
        self._check_writable()
        for archive in archives:
            _uploads.plan_parts(self.blobs, archive)  # its layout, before a byte is written
        with _workdirs.commit_dir(self.blobs) as tmp:  # where gc and a server's start sweep
            paths = [_uploads.assemble(self.blobs, a, tmp) for a in archives]
            return self.push(paths, name, **push)

    def alias(self, name: str, alias: str, version: int | None) -> None:
        """Points ``name@alias`` at ``version`` (None: removes it), in one transaction; every
        move is kept in ``alias_history``.

        Raises:
            NotFoundError: no such name or version.
            InvalidNameError: a bad name, alias or version.
            SignatureError: under ``require_signatures``, the version is not signed as the
                registry's keys or the alias's rule require (see ``SignaturePolicy``).
        """
        self._check_writable()
        rules = self._alias_rules(alias) if version is not None else []
        if rules:
            self._signatures.check_version(self.get(f"{check_name(name)}:{version}"), rules)
        self._aliases.set(name, alias, version)

    def sign(
        self,
        reference: str,
        *,
        private_key: str | os.PathLike[str],
        password: str | None = None,
        certificate: str | os.PathLike[str] | None = None,
        certificate_chain: Sequence[str | os.PathLike[str]] = (),
    ) -> builtins.list[Signature]:
        """Signs every variant of a version (``model-signing``: a Sigstore bundle over each
        archive's sha256) and stores the bundles beside it; each archive is read and checked
        against its digest first. A key's earlier signature of the same archive is replaced.

        Args:
            reference: ``NAME:VERSION``, ``NAME@ALIAS``, ``sha256:PREFIX`` or ``NAME`` (newest).
            private_key: a PEM elliptic-curve private key (P-256, P-384, P-521).
            password: the key's password, if it is encrypted.
            certificate: the key's PEM certificate, with ``certificate_chain`` (intermediates,
                then root): a certificate signature, verified against CA certificates.

        Returns:
            One ``Signature`` per variant.

        Raises:
            SignatureError: the key cannot be read (wrong password, unsupported curve) or does
                not match the certificate.
            IntegrityError: a variant's archive is missing or corrupt: nothing of it is signed.
            UnsupportedFeatureError: ``model-signing`` is not installed (``jaxport[signing]``).
            (and see ``get``)
        """
        self._check_writable()
        signed = self._signatures.sign(
            reference, private_key, password=password, certificate=certificate,
            certificate_chain=certificate_chain,
        )  # fmt: skip
        ref = self._queries.get(reference)
        self._events.record(
            "sign", ref.name, ref.version, {"signers": sorted({s.signer for s in signed})}
        )
        return signed

    def signatures(self, reference: str) -> builtins.list[Signature]:
        """The signatures stored for a version's variants, as stored (not verified: see
        ``verify_signatures``).

        Raises:
            (see ``get``)
        """
        return self._signatures.of(self._queries.get(reference))

    def verify_signatures(
        self, reference: str, keys: Sequence[str | os.PathLike[str] | bytes]
    ) -> builtins.list[SignatureCheck]:
        """Each variant of a version, checked: does a stored signature verify with one of
        ``keys`` (PEM public keys or CA certificates, paths or bytes) over its archive? If not,
        the check says why (no signature, other signers, one that does not verify).

        Raises:
            SignatureError: a key that is not a PEM public key or certificate.
            (and see ``get``)
        """
        trusted = SignaturePolicy(keys).keys
        return self._signatures.verify(self._queries.get(reference), trusted)

    def delete(self, name: str, version: int | None = None, *, force: bool = False) -> None:
        """Deletes a version (or, with ``version`` None, every version of the name); blobs stay
        until ``gc``. Version numbers are never handed out again, also after a whole name.

        Raises:
            NotFoundError: no such name or version.
            ConflictError: aliases point at what would be deleted and ``force`` is False (with
                ``force`` they are removed too).
        """
        check_name(name)
        if version is not None:
            check_version(version)
        self._check_writable()
        self._maintenance.delete(name, version, force=force)
        self._events.record("delete", name, version, {"force": bool(force)})

    def gc(
        self, *, dry_run: bool = False, min_age: float = 3600.0, temp_age: float = 3600.0
    ) -> GcReport:
        """Removes blobs nothing refers to, and stale temporary files; ``dry_run`` only reports.

        Safe beside concurrent pushes at any ``min_age`` and ``temp_age`` (see
        ``registry/_publish.py``): a temporary file of a push in flight is never removed.

        Args:
            dry_run: report what would be removed, remove nothing.
            min_age: keep unreferenced blobs younger than this, in seconds: the parts an
                interrupted upload through a server sent (so that it resumes without sending
                them again), or blobs an older jaxport's push in flight wrote.
            temp_age: remove temporary files of killed writes older than this, in seconds
                (a younger one may belong to a write of an older jaxport still in progress).

        Raises:
            InvalidNameError: ``min_age`` or ``temp_age`` is not a finite number >= 0.

        Returns:
            A ``GcReport``: removed digests and bytes, and what was kept back and why.
        """
        min_age = check_seconds(min_age, "min_age")
        temp_age = check_seconds(temp_age, "temp_age")
        if not dry_run:
            self._check_writable()
        report = self._maintenance.gc(dry_run=bool(dry_run), min_age=min_age, temp_age=temp_age)
        if not dry_run:
            self._events.record(
                "gc", detail={"removed": len(report.digests), "bytes": report.bytes,
                              "temp_files": len(report.temp_files)},
            )  # fmt: skip
        return report

    def verify(self, *, deep: bool = False, timeout: float = 120.0) -> VerifyReport:
        """Recomputes the digest of every blob the database refers to; names each version that
        a missing or corrupt blob affects.

        Args:
            deep: also read every archive in full, each module parsed, in a worker process
                (jaxlib may crash on a malformed module): a header whose custom-call targets
                disagree with its modules, or any other unreadable part, is ``invalid``.
            timeout: with ``deep``, seconds one archive may take before its worker is killed
                (the archive is then ``invalid``, naming the limit); > 0, at most a day.

        Raises:
            InvalidNameError: a ``timeout`` that is not > 0 and at most a day.
        """
        return self._maintenance.verify(deep=deep, timeout=check_timeout(timeout, "timeout"))

    # -- reading ----------------------------------------------------------------------------

    def resolve(
        self,
        reference: str,
        *,
        version: int | None = None,
        platform: Any = _LOCAL,
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
                GPU kind); default the local jax backend; None: any.
            nr_devices: the device count to run on; None: any.

        Raises:
            NotFoundError: no such name, version, alias or digest.
            InvalidNameError: a malformed reference, platform or count.
        """
        if version is not None:
            reference = f"{check_name(reference)}:{check_version(version)}"
        if platform is _LOCAL and isinstance(reference, str) and reference.startswith("sha256:"):
            platform = None
        return self._queries.resolve(reference, _platform(platform), nr_devices)

    def pull(
        self,
        reference: str,
        *,
        version: int | None = None,
        platform: Any = _LOCAL,
        nr_devices: int | None = None,
        allow_custom_calls: Sequence[str] = (),
        method: str | None = None,
    ) -> Exported:
        """The ``jax.export.Exported`` that ``resolve`` chooses, digest verified.

        ``method`` names one method of a model variant: its ``Exported``, which takes the
        parameter tree as its first argument (``method(params, *args)``); only the model's
        skeleton is read (``pull_model(...).exported[method]``), no tensor.

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
        return self._pulls.exported(reference, chosen, allow_custom_calls, method)

    def pull_model(
        self,
        reference: str,
        *,
        version: int | None = None,
        platform: Any = _LOCAL,
        nr_devices: int | None = None,
        allow_custom_calls: Sequence[str] = (),
    ) -> Model:
        """The ``jaxport.Model`` of the variant ``resolve`` chooses (same references and
        variant choice as ``pull``).

        Only the skeleton (header and modules) is read now, digest verified; each tensor's blob
        is read when the model first uses it (memory-mapped from a local blob store, fetched
        from another) and checked against its sha256 then: ``.exported["m"]`` reads no tensor,
        a method call reads only the tensors that method uses (``Model.bytes_read``). The
        blobs must stay until the tensors are read (``gc`` removes those of deleted versions).

        Args:
            reference, version, platform, nr_devices: as ``pull``.
            allow_custom_calls: as ``pull``.

        Raises:
            NotFoundError: nothing matches (see ``pull``), or the version was deleted meanwhile.
            WrongKindError: the variant is a function: use ``pull``.
            IntegrityError: the skeleton is missing or corrupt; later, when a tensor is used,
                its blob is missing or does not match its digest (no array is returned).
            SignatureError: see ``pull``; under a policy a model's parts are read once to check
                that they make the archive signed.
            (and see ``resolve`` and ``jaxport.loads_model``)
        """
        chosen = self._signed(reference, version, platform, nr_devices)
        return self._pulls.model(chosen, allow_custom_calls)

    def pull_bytes(
        self,
        reference: str,
        *,
        version: int | None = None,
        platform: Any = _LOCAL,
        nr_devices: int | None = None,
    ) -> bytes:
        """The archive bytes of the variant ``resolve`` chooses, exactly as pushed, digest
        verified (see ``pull``): a model archive is put together from its parts, each verified.
        Under ``require_signatures``, a variant not signed as required raises ``SignatureError``.
        """
        chosen = self._signed(reference, version, platform, nr_devices)
        return self._pulls.archive_bytes(reference, chosen)

    def pull_file(
        self,
        reference: str,
        path: str | os.PathLike[str],
        *,
        version: int | None = None,
        platform: Any = _LOCAL,
        nr_devices: int | None = None,
    ) -> VariantInfo:
        """Writes the archive ``pull_bytes`` gives to ``path``, atomically (a temporary file
        renamed over it): a model archive one part at a time, never whole in memory.

        Returns:
            The variant written.

        Raises:
            OSError: the directory is missing or not writable.
            (and see ``pull_bytes``; on any error ``path`` is left as it was)
        """
        chosen = self._signed(reference, version, platform, nr_devices)
        self._pulls.write_file(reference, chosen, path)
        return chosen

    def read_blob(self, digest: str) -> bytes:
        """A blob's bytes, verified against its digest; for the digest of a model archive (whose
        parts are the blobs), the archive put together from its parts.

        Raises:
            IntegrityError: the blob (or a part) is missing or corrupt.
            InvalidNameError: ``digest`` is not 64 lowercase hex digits.
        """
        return self._pulls.blob(digest)

    def inspect(
        self,
        reference: str,
        *,
        version: int | None = None,
        platform: Any = _LOCAL,
        nr_devices: int | None = None,
    ) -> ArchiveInfo:
        """``jaxport.inspect`` of the archive ``resolve`` chooses, from its preamble and header
        alone (a registry server sends those bytes only: HTTP range requests).

        Raises:
            NotFoundError: nothing matches (see ``pull``).
            CorruptArchiveError: a malformed header.
            (and see ``resolve``)
        """
        chosen = self._chosen(reference, version, platform, nr_devices)
        return ranged_info(self._read_range(chosen.digest), chosen.size_bytes)

    def _read_range(self, digest: str) -> Callable[[int, int], bytes]:
        stream = self.blob_stream(digest)
        return lambda start, end: b"".join(stream.chunks(start, end))

    def blob_stream(self, digest: str) -> BlobStream:
        """A blob, or the archive of a model variant with that digest, as a ``BlobStream``:
        its ``size`` in bytes and ``chunks(start, end)``, a whole read verified as it goes
        (``registry/_streams.py``; what ``jaxport serve`` sends).

        Raises:
            NotFoundError: no such blob or archive.
            InvalidNameError: ``digest`` is not 64 lowercase hex digits.
        """
        check_digest(digest)
        return self._pulls.stream(digest)

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
            self._signatures.check_variant(chosen, self.require_signatures.rules(alias))
        return chosen

    def _alias_rules(self, alias: str) -> builtins.list[Any]:
        policy = self.require_signatures
        return [] if policy is None else policy.rules(alias)

    def get(self, reference: str) -> Ref:
        """The version ``NAME:VERSION``, ``NAME@ALIAS`` or ``sha256:PREFIX`` names; the newest
        for a bare ``NAME``. A model variant lists its ``methods`` and ``tensors``, read from
        its archive's header (``jaxport.inspect``).

        Raises:
            NotFoundError: no such name, version, alias or digest, or a name without versions.
            InvalidNameError: a malformed reference.
            IntegrityError: a model variant's skeleton blob is missing or its header corrupt.
        """
        ref = self._queries.get(reference)
        return dataclasses.replace(ref, variants=tuple(map(self._pulls.described, ref.variants)))

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
        return self._queries.page(name, limit=limit, after=after)

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
        return self._queries.search(filters, limit=limit, after=after)

    def names(self) -> builtins.list[str]:
        """Every name, sorted."""
        return self._queries.names()

    def aliases(self, name: str) -> dict[str, int]:
        """``name``'s aliases and the versions they point at.

        Raises:
            NotFoundError: no such name.
        """
        return self._aliases.of(name)

    def alias_history(self, name: str, alias: str | None = None) -> builtins.list[AliasMove]:
        """The moves of ``name``'s aliases (or of one alias), oldest first.

        Raises:
            NotFoundError: no such name.
        """
        return self._aliases.history(name, alias)

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
        return self._events.list(name=name, limit=limit, before=before)

    # -- audits -----------------------------------------------------------------------------

    def audit(
        self,
        reference: str | None = None,
        *,
        platform: str | None = None,
        store: bool = True,
        python: str | os.PathLike[str] | None = None,
        timeout: float = 120.0,
        force: bool = False,
        level: str = "full",
        workers: int = 1,
        jax: str | None = None,
        progress: Callable[[int, int], None] | None = None,
        tolerance: float | tuple[float, float] | Mapping[str, float] | str | None = None,
    ) -> builtins.list[Finding]:
        """Audits variants with a jax: loads, compiles, re-runs golden examples (``jaxport.audit``).

        Each variant is audited for each platform it was exported for (or only ``platform``),
        in a worker process (``python -m jaxport.audit._worker``) with time and memory limits,
        so a crash in jaxlib becomes a ``crash`` finding. A check that cannot run here (no
        such device, too few devices) is ``not-run``, with the reason.

        Incremental: a stored finding with the same digest x level x jax x jaxlib x platform x
        devices is returned again (``Finding.reused``) instead of measured, unless ``force``;
        when every finding is stored, no worker starts and no module is parsed. Versions that
        share an archive (and golden examples) are measured once.

        Args:
            reference: ``NAME:VERSION`` / ``NAME@ALIAS`` / ``sha256:PREFIX`` (that version),
                ``NAME`` (all its versions) or None (every version in the registry).
            platform: audit only for this platform (any case; ``gpu``: the local GPU kind).
            store: record the findings in the registry (``audit_results``).
            python: audit with the jax of another environment: an interpreter where jaxport
                and another jax release are installed. The archives are handed to it; the
                database is not (no URL or password leaves this process).
            timeout: seconds one variant's audit may take before it is killed (``crash``);
                a module that hangs the parser is stopped sooner, by the module sandbox;
                > 0, at most a day.
            force: measure again even where a finding with the same key is stored.
            level: ``"full"`` (load, compile, golden examples) or ``"static"`` (the facts
                recorded at push against the jax's capabilities: nothing parsed or compiled;
                ``jaxport.audit._static``).
            workers: worker processes auditing at once (full level), each importing jax once.
            jax: a jax release (``"0.7.0"``): audit in an environment with that jax and
                this jaxport, made once under ``$JAXPORT_HOME/envs/jax-RELEASE`` and reused
                (``uv`` when on PATH, else venv and pip; the first time takes minutes and
                needs the package index). Not with ``python``.
            progress: called as ``progress(done, total)`` as the audit advances (counting
                measurements: stored ones are done from the start).
            tolerance: compare the golden examples with this tolerance instead of the one
                stored with them (``push(..., tolerance=...)``, else the rule per dtype and
                output magnitude); as ``push``'s, or the CLI's ``"1e-4"`` /
                ``"rtol=1e-5,atol=1e-4"``. Its findings are stored apart (keyed by the
                examples with that tolerance), so they never stand for the stored tolerance.

        Returns:
            One ``Finding`` per variant and platform.

        Raises:
            NotFoundError: no such name, version or alias; ``python`` does not exist.
            InvalidNameError: an unknown platform or level, workers < 1, a ``timeout`` that
                is not > 0 and at most a day, both ``python`` and ``jax``, a ``jax`` that is
                not a release number.
            AuditError: the worker could not start (e.g. no jaxport in that environment), or
                the environment for ``jax`` could not be made.
        """
        if store:
            self._check_writable()
        wanted = None if platform is None else normalize_platform(platform)
        if level not in ("full", "static"):
            raise InvalidNameError(f"level must be 'full' or 'static', got {level!r:.40}")
        timeout = check_timeout(timeout, "timeout")
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
            raise InvalidNameError(f"workers must be a positive int, got {workers!r:.40}")
        if jax is not None:
            if python is not None:
                raise InvalidNameError("give python or jax, not both")
            from jaxport.audit import jax_environment

            python = jax_environment(jax, default_home())
        return self._findings.audit(
            reference,
            platform=wanted,
            store=store,
            python=python,
            timeout=timeout,
            force=force,
            level=level,
            workers=workers,
            progress=progress,
            tolerance=tolerance,
        )

    def audit_results(
        self,
        *,
        name: str | None = None,
        jax_version: str | None = None,
        platform: str | None = None,
        limit: int = 10_000,
    ) -> builtins.list[Finding]:
        """Stored findings, newest first, joined to the versions that hold each digest.

        Raises:
            NotFoundError: ``name`` does not exist.
            InvalidNameError: an unknown platform.
        """
        wanted = None if platform is None else normalize_platform(platform)
        return self._findings.results(
            name=name, jax_version=jax_version, platform=wanted, limit=limit
        )

    def windows(
        self,
        reference: str | None = None,
        *,
        expiring_before: str | datetime.date | None = None,
    ) -> builtins.list[VariantWindow]:
        """Where each variant stands in jax's 6-month backward-compatibility window, judged
        against the installed jax (``jaxport.jax_window``), with the newest jax release a stored
        audit found it ``ok`` under (``window.last_known_release``).

        Args:
            reference: as ``audit``: one version, all of a name's, or None (every version).
            expiring_before: only variants whose window ends before this date (a ``date`` or
                ``YYYY-MM-DD``), and those whose end is unknown (a producer release missing
                from ``jaxport._window.JAX_RELEASE_DATES``, or not recorded).

        Raises:
            NotFoundError: no such name, version or alias.
            InvalidNameError: a malformed reference, or ``expiring_before`` is not a date.
        """
        before = None if expiring_before is None else expiring_date(expiring_before)
        if reference is None:
            refs = [r for n in self.names() for r in self._all_versions(n)]
        else:
            parsed = parse_reference(reference)
            bare = parsed.version is None and parsed.alias is None and parsed.name is not None
            refs = self._all_versions(reference) if bare else [self._queries.get(reference)]
        names = sorted({r.name for r in refs})
        findings = [
            f
            for n in names
            for f in self._findings.results(
                name=n, jax_version=None, platform=None, limit=1_000_000
            )
        ]
        return variant_windows(refs, findings, expiring_before=before)

    def _all_versions(self, name: str) -> builtins.list[Ref]:
        return self._queries.page(name, limit=1_000_000, after=None)

    def upgrade_report(
        self,
        target: str | os.PathLike[str],
        reference: str | None = None,
        *,
        platform: str | None = None,
        store: bool = True,
        timeout: float = 120.0,
    ) -> builtins.list[UpgradeRow]:
        """What breaks if the running jax is replaced by ``target``, per variant and platform.

        Args:
            target: a jax release whose findings are stored (``"0.7.0"``, digits and dots),
                or an interpreter (a path, or a name on ``PATH`` such as ``python3.12``):
                then ``reference`` is audited there and here first.
            reference: limit to a name (``NAME``), or to one version (``NAME:V``,
                ``NAME@ALIAS``, a digest prefix).
            platform: limit to one platform.
            store: record the findings of audits this report runs.
            timeout: seconds one variant's audit may take (an interpreter ``target``).

        Returns:
            One row per variant (``name``, ``version``, ``digest``) and platform with a
            finding under either release, sorted, none twice; ``after`` is ``"not audited"``
            for a row the target has no finding for (those rows are named, never dropped).

        Raises:
            NotFoundError: an interpreter path that does not exist, an unknown or deleted
                name.
        """
        if not isinstance(target, str | os.PathLike):
            raise InvalidNameError(f"target must be a release or a path, got {target!r:.40}")
        wanted = None if platform is None else normalize_platform(platform)
        return self._findings.upgrade_report(
            os.fspath(target), reference, platform=wanted, store=store, timeout=timeout
        )

    def diff(self, a: str, b: str) -> builtins.list[Change]:
        """The changes from version ``a`` to version ``b`` (``NAME:V`` / ``NAME@ALIAS``), each
        classified breaking or compatible (``jaxport.audit``'s diff rules)."""
        return self._findings.diff(a, b)

    # -- the audit queue (PostgreSQL; registry/_queue.py) ---------------------------------

    def enqueue_audits(
        self,
        reference: str | None = None,
        *,
        platform: str | None = None,
        timeout: float = 120.0,
    ) -> builtins.list[QueuedJob]:
        """Puts audit jobs into the queue in the registry's database, one per variant and
        platform (as ``audit`` would run them here), for ``run_audit_worker`` on each
        platform's hosts to take. A job already waiting for the same archive, platform and
        device count is not added twice (its ``job_id`` is None).

        Args:
            reference, platform, timeout: as ``audit`` (``platform``: cpu, cuda, rocm, tpu).

        Returns:
            One ``QueuedJob`` per archive and platform, in registry order.

        Raises:
            UnsupportedFeatureError: not a PostgreSQL registry (SQLite: use ``audit``), or
                procrastinate is not installed (``jaxport[queue]``).
            RegistryError: the queue's tables are missing (``jaxport db upgrade``).
            NotFoundError, InvalidNameError: as ``audit``.
        """
        self._check_writable()
        return _queue.enqueue(
            self._engine, self._queries, reference, platform, check_seconds(timeout, "timeout")
        )

    def check_audit_queue(self) -> None:
        """Checks that this registry holds an audit queue (``enqueue_audits`` would work).

        Raises:
            UnsupportedFeatureError, RegistryError: see ``enqueue_audits``.
        """
        _queue.check(self._engine)

    def run_audit_worker(
        self,
        platforms: Sequence[str],
        *,
        concurrency: int = 1,
        until_idle: bool = False,
        stalled_after: float = 60.0,
        on_finding: Callable[[Finding, bool], None] | None = None,
    ) -> None:
        """Takes the queue's audit jobs for ``platforms`` (those this host has) and runs each
        through ``audit`` (its worker process and sandbox), recording each finding once per
        digest x jax x jaxlib x platform x devices. Runs until SIGINT or SIGTERM (the jobs in
        hand are finished first), or with ``until_idle`` until no job of those platforms waits
        or runs anywhere.

        Args:
            platforms: cpu, cuda, rocm and/or tpu.
            concurrency: jobs audited at once (each in its own audit worker process).
            until_idle: return once the queues of ``platforms`` are empty.
            stalled_after: seconds without a heartbeat after which a worker counts as dead:
                its jobs are put back in the queue (a worker sends one every 5 s, or every
                quarter of ``stalled_after`` if less).
            on_finding: called with each job's finding and whether it was recorded (False: its
                key had one already).

        Raises:
            UnsupportedFeatureError, RegistryError: see ``enqueue_audits``.
            InvalidNameError: no platform, or one outside cpu, cuda, rocm, tpu.
        """
        self._check_writable()
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise InvalidNameError(f"concurrency must be a positive int, got {concurrency!r:.40}")
        _queue.run_worker(
            self, self._engine, platforms, concurrency=concurrency, until_idle=until_idle,
            stalled_after=check_seconds(stalled_after, "stalled_after"), on_finding=on_finding,
        )  # fmt: skip

    # -- internals --------------------------------------------------------------------------

    def _check_writable(self) -> None:
        if self._writable:
            return
        with _db.translating_db_errors(), self._engine.connect() as conn:
            writer = _db.schema_writer(conn)
            revision = _db.current_revision(conn)
        use = f"jaxport {writer} or newer" if writer else "a newer jaxport"
        raise SchemaVersionError(
            f"the registry database is at schema revision {revision}, which this jaxport "
            f"({__version__}, revision {HEAD}) does not know: use {use} to write to it "
            "(reading works)",
            found=revision,
            expected=HEAD,
        )


def _remote_url(url: str | None) -> bool:
    if not is_server_url(url if url is not None else RegistryConfig.from_env().url):
        return False
    require("httpx", "a registry server's client (an http(s):// registry URL)")
    return True


def _open_sqlite_directory(url: str, config: RegistryConfig) -> None:
    """Makes the embedded default registry's directory; refuses any other SQLite file whose
    directory is missing (``check_sqlite_directory``).

    Raises:
        RegistryError: the directory of ``url``'s database file does not exist.
    """
    path = sqlite_file(url)
    if path is not None and url == config.default_database_url():
        path.parent.mkdir(parents=True, exist_ok=True)
    check_sqlite_directory(url)


def _platform(platform: Any) -> str | None:
    if platform is None:
        return None
    if platform is _LOCAL:
        from jaxport.export import local_platform

        return local_platform()
    return normalize_platform(platform)
