"""``Registry``: push and pull ``Exported`` artifacts by name, version, platform and devices."""

from __future__ import annotations

import builtins
import dataclasses
import hashlib
import json
import os
import time
import types
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from sqlalchemy import (
    Connection,
    and_,
    bindparam,
    delete,
    exists,
    func,
    insert,
    or_,
    select,
    update,
)

from jaxport._errors import (
    ConflictError,
    IntegrityError,
    InvalidNameError,
    NotFoundError,
    RegistryError,
    SchemaVersionError,
    UnsupportedFeatureError,
)
from jaxport._version import __version__
from jaxport.export import _compat, dumps, inspect, loads
from jaxport.export._info import ArchiveInfo
from jaxport.migrations import HEAD
from jaxport.registry import _db
from jaxport.registry._audit import (
    AuditResult,
    Finding,
    UpgradeRow,
    audit_archive,
    compare_findings,
)
from jaxport.registry._blobs import BlobStore, open_blob_store, verify
from jaxport.registry._diff import Change, diff_variant_sets
from jaxport.registry._examples import Example, encode_examples
from jaxport.registry._models import (
    Alias,
    AliasMove,
    Audit,
    Blob,
    Model,
    Variant,
    VariantPlatform,
    Version,
    VersionExamples,
)
from jaxport.registry._refs import (
    Ref,
    Rejection,
    Resolution,
    VariantInfo,
    check_name,
    parse_reference,
)

__all__ = [
    "DEFAULT_HOME_ENV",
    "DEFAULT_URL_ENV",
    "GcReport",
    "Registry",
    "VerifyReport",
    "default_home",
    "default_url",
    "schema_revision",
    "upgrade_database",
]

#: Environment variable: the directory of the embedded default registry.
DEFAULT_HOME_ENV = "JAXPORT_HOME"
#: Environment variable: the database URL of the default registry.
DEFAULT_URL_ENV = "JAXPORT_REGISTRY"
_LOCAL = object()  # "the local jax backend", the default platform of pull / resolve
# Statements built once, so SQLAlchemy's compiled cache is hit on every push.
_NEXT_VERSION = (
    update(Model)
    .where(Model.name == bindparam("model_name"))
    .values(last_version=Model.last_version + 1)
    .returning(Model.id, Model.last_version)
)
_INSERT_VERSION = insert(Version).returning(Version.id)
_INSERT_VARIANT = insert(Variant).returning(Variant.id)
_MAX_REJECTIONS = 100


def default_home() -> Path:
    """``$JAXPORT_HOME``, else ``$XDG_DATA_HOME/jaxport``, else ``~/.local/share/jaxport``."""
    if home := os.environ.get(DEFAULT_HOME_ENV):
        return Path(home)
    data = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(data) / "jaxport"


def default_url() -> str:
    """``$JAXPORT_REGISTRY``, else SQLite at ``default_home() / "registry.db"`` (created)."""
    if url := os.environ.get(DEFAULT_URL_ENV):
        return url
    home = default_home()
    home.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{home / 'registry.db'}"


def local_platform() -> str:
    """The local jax backend's platform name as exports use it: cpu, cuda, rocm or tpu."""
    import jax

    backend = jax.default_backend()
    if backend == "gpu":
        version = str(getattr(jax.devices()[0].client, "platform_version", "")).lower()
        return "rocm" if "rocm" in version else "cuda"
    return backend


@dataclasses.dataclass(frozen=True)
class GcReport:
    """What ``gc`` removed (or, on a dry run, would remove); ``bytes`` in bytes."""

    digests: tuple[str, ...]
    bytes: int
    dry_run: bool


@dataclasses.dataclass(frozen=True)
class VerifyReport:
    """What ``verify`` found: every digest the database refers to, checked against the store.

    Attributes:
        checked: digests read and hashed.
        missing: digests the database refers to that the store lacks.
        corrupt: digests whose stored bytes do not hash to them.
        unreferenced: digests in the store that no variant refers to (``gc`` removes them).
    """

    checked: int
    missing: tuple[str, ...]
    corrupt: tuple[str, ...]
    unreferenced: tuple[str, ...]

    @property
    def ok(self) -> bool:
        """No blob missing or corrupt (unreferenced ones are harmless)."""
        return not self.missing and not self.corrupt


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
            ``default_home() / "registry.db"``.
        blobs: a directory or fsspec URL for the archives. Default: ``blobs/`` beside a SQLite
            database file; required for other databases.
        upgrade: upgrade an older database schema to this jaxport's (alembic).

    Raises:
        SchemaVersionError: the database's schema is older and ``upgrade`` is False.
        RegistryError: the database cannot be reached.
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        blobs: str | os.PathLike[str] | BlobStore | None = None,
        upgrade: bool = False,
    ):
        url = url or default_url()
        if blobs is None:
            blobs = _default_blobs(url)
        self.url = url
        self.blobs = open_blob_store(blobs)
        self._engine = _db.create_registry_engine(url)
        with _db.translating_db_errors():
            self._writable = _db.ensure_schema(self._engine, upgrade_db=upgrade)

    def close(self) -> None:
        """Releases the database connections."""
        self._engine.dispose()

    def __enter__(self) -> Registry:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        url = self._engine.url.render_as_string(hide_password=True)
        return f"Registry({url!r}, blobs={self.blobs.url!r})"

    # -- writing --------------------------------------------------------------------------

    def push(
        self,
        exported: Any,
        name: str | None = None,
        *,
        vjp_order: int = 0,
        aliases: Iterable[str] = (),
        metadata: Mapping[str, str] | None = None,
        examples: Sequence[Example | tuple[Any, ...]] | None = None,
    ) -> Ref:
        """Stores one ``Exported`` (or a list: the variants of one version) as a new version.

        Blobs are written durably before the database row is committed: a failed push leaves
        the registry as it was (at most an orphan blob, which ``gc`` removes) and consumes no
        version number. Pushing the same archives again returns the existing version.

        Args:
            exported: a ``jax.export.Exported``, or a list of them (e.g. one per platform or
                device count).
            name: defaults to the first Exported's ``fun_name``.
            vjp_order: VJP orders stored with each (see ``jaxport.dumps``).
            aliases: aliases to point at the new version, e.g. ``["prod"]``.
            metadata: user strings, stored in each archive and on the version.
            examples: golden examples that audits re-run: ``Example(args, kwargs, outputs)``
                or ``(args, kwargs)`` tuples. Outputs left None are computed now, by the first
                variant that runs here; give them for an artifact whose producer's outputs
                are known (e.g. imported from another jax release).

        Returns:
            The version's ``Ref`` (name, version, variants with their digests).

        Raises:
            InvalidNameError: a bad name or alias (``check_name``'s rules).
            SchemaVersionError: the database is newer than this jaxport.
            UnsupportedFeatureError, UnsupportedVersionError: see ``jaxport.dumps``.
        """
        items = list(exported) if isinstance(exported, list | tuple) else [exported]
        if not items:
            raise ValueError("push needs at least one Exported")
        name = self._push_name(name, items[0])
        aliases = [check_name(a, "alias") for a in aliases]
        self._check_writable()
        archives = [dumps(e, vjp_order=vjp_order, metadata=metadata) for e in items]
        digests = [hashlib.sha256(a).hexdigest() for a in archives]
        golden = _golden_blob(items, examples) if examples else None
        with _db.translating_db_errors():
            # New content cannot be an existing version: skip the lookup when a blob is new.
            if golden is None and all(self.blobs.exists(d) for d in digests):
                existing = self._find_version_with(name, digests)
                if existing is not None:
                    for alias in aliases:
                        self.alias(name, alias, existing.version)
                    return existing
            for digest, data in zip(digests, archives, strict=True):
                self.blobs.put(digest, data)
            if golden is not None:
                self.blobs.put(golden[0], golden[1])
            infos = [inspect(a) for a in archives]
            with _db.write_transaction(self._engine) as conn:
                version, rows = self._insert_version(conn, name, digests, archives, infos, metadata)
                if golden is not None:
                    self._insert_examples(conn, rows[0].version_id, golden, len(examples or ()))
                for alias in aliases:
                    self._move_alias(conn, name, alias, version)
            return Ref(name, version, tuple(VariantInfo.from_row(name, version, r) for r in rows))

    @staticmethod
    def _push_name(name: str | None, first: Any) -> str:
        if name is not None:
            return check_name(name)
        try:
            return check_name(first.fun_name)
        except InvalidNameError as e:
            raise InvalidNameError(f"{e}; pass name= to push") from None

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

    def _find_version_with(self, name: str, digests: Sequence[str]) -> Ref | None:
        with self._engine.connect() as conn:
            rows = conn.execute(
                select(Version.version, Variant.digest)
                .join(Model, Model.id == Version.model_id)
                .join(Variant, Variant.version_id == Version.id)
                .where(Model.name == name, Variant.digest == digests[0])
                .order_by(Version.version.desc())
            ).all()
            for version, _ in rows:
                found = (
                    conn.execute(
                        select(Variant.digest)
                        .join(Version, Variant.version_id == Version.id)
                        .join(Model, Model.id == Version.model_id)
                        .where(Model.name == name, Version.version == version)
                        .order_by(Variant.id)
                    )
                    .scalars()
                    .all()
                )
                if list(found) == list(digests):
                    return self._ref(name, version)
        return None

    def _insert_version(
        self,
        conn: Connection,
        name: str,
        digests: Sequence[str],
        archives: Sequence[bytes],
        infos: Sequence[ArchiveInfo],
        metadata: Mapping[str, str] | None,
    ) -> tuple[int, builtins.list[Any]]:
        """Allocates the next version of ``name`` and inserts it; returns it and its rows."""
        now = time.time()
        _db.insert_ignoring_duplicates(
            conn, Model.__table__, [{"name": name, "last_version": 0, "created_at": now}], ["name"]
        )
        # The row lock taken here queues concurrent pushes to one name until commit.
        model_id, version = conn.execute(_NEXT_VERSION, {"model_name": name}).one()
        meta_json = json.dumps(dict(metadata or {}), sort_keys=True)
        version_id = conn.execute(
            _INSERT_VERSION,
            {
                "model_id": model_id,
                "version": version,
                "created_at": now,
                "metadata_json": meta_json,
            },
        ).scalar_one()
        blobs = [
            {"digest": d, "size": len(a), "created_at": now}
            for d, a in zip(digests, archives, strict=True)
        ]
        _db.insert_ignoring_duplicates(conn, Blob.__table__, blobs, ["digest"])
        rows = []
        for digest, data, info in zip(digests, archives, infos, strict=True):
            row = _variant_row(version_id, digest, len(data), info, now, meta_json)
            row["id"] = conn.execute(_INSERT_VARIANT, row).scalar_one()
            platforms = [
                {"variant_id": row["id"], "platform": p} for p in dict.fromkeys(info.platforms)
            ]
            conn.execute(insert(VariantPlatform), platforms)
            rows.append(types.SimpleNamespace(**row))
        return int(version), rows

    @staticmethod
    def _insert_examples(
        conn: Connection, version_id: int, golden: tuple[str, bytes], count: int
    ) -> None:
        digest, data = golden
        row = {"digest": digest, "size": len(data), "created_at": time.time()}
        _db.insert_ignoring_duplicates(conn, Blob.__table__, [row], ["digest"])
        conn.execute(
            insert(VersionExamples), {"version_id": version_id, "digest": digest, "count": count}
        )

    def alias(self, name: str, alias: str, version: int | None) -> None:
        """Points ``name@alias`` at ``version`` (None: removes the alias), in one transaction.

        Every move is kept in the history (``alias_history``).

        Raises:
            NotFoundError: no such name or version.
            InvalidNameError: a bad alias.
        """
        check_name(name)
        check_name(alias, "alias")
        self._check_writable()
        with _db.translating_db_errors(), _db.write_transaction(self._engine) as conn:
            self._move_alias(conn, name, alias, version)

    def _move_alias(self, conn: Connection, name: str, alias: str, version: int | None) -> None:
        model_id = self._model_id(conn, name, lock=True)  # alias moves of a name queue here
        if version is not None:
            self._version_id(conn, model_id, name, version)
        old = conn.execute(
            select(Alias.version).where(Alias.model_id == model_id, Alias.alias == alias)
        ).scalar_one_or_none()
        if old == version:
            return
        now = time.time()
        conn.execute(delete(Alias).where(Alias.model_id == model_id, Alias.alias == alias))
        if version is not None:
            conn.execute(
                insert(Alias).values(
                    model_id=model_id, alias=alias, version=version, updated_at=now
                )
            )
        conn.execute(
            insert(AliasMove).values(
                model_id=model_id, alias=alias, from_version=old, to_version=version, moved_at=now
            )
        )

    def alias_history(
        self, name: str, alias: str | None = None
    ) -> list[tuple[str, int | None, int | None, float]]:
        """The moves of ``name``'s aliases, oldest first: ``(alias, from, to, unix seconds)``."""
        with _db.translating_db_errors(), self._engine.connect() as conn:
            model_id = self._model_id(conn, name)
            q = select(AliasMove).where(AliasMove.model_id == model_id).order_by(AliasMove.id)
            if alias is not None:
                q = q.where(AliasMove.alias == alias)
            return [(r.alias, r.from_version, r.to_version, r.moved_at) for r in conn.execute(q)]

    def delete(self, name: str, version: int, *, force: bool = False) -> None:
        """Deletes a version and its variants; their blobs stay until ``gc``.

        Raises:
            NotFoundError: no such name or version.
            ConflictError: aliases point at the version and ``force`` is False (with ``force``,
                those aliases are removed, and the removal kept in their history).
        """
        self._check_writable()
        with _db.translating_db_errors(), _db.write_transaction(self._engine) as conn:
            model_id = self._model_id(conn, name)
            version_id = self._version_id(conn, model_id, name, version)
            pointing = (
                conn.execute(
                    select(Alias.alias).where(Alias.model_id == model_id, Alias.version == version)
                )
                .scalars()
                .all()
            )
            if pointing and not force:
                raise ConflictError(
                    f"{name}:{version} is aliased as {', '.join(sorted(pointing))}: move the "
                    "aliases first, or delete with force=True"
                )
            for alias in pointing:
                self._move_alias(conn, name, alias, None)
            conn.execute(delete(Version).where(Version.id == version_id))

    def gc(self, *, dry_run: bool = False, min_age: float = 3600.0) -> GcReport:
        """Removes blobs no variant refers to; ``dry_run`` only reports them.

        Args:
            dry_run: report what would be removed, remove nothing.
            min_age: keep unreferenced blobs younger than this, in seconds, which may belong to
                a push in progress (its blob is written before its row is committed).

        Returns:
            The digests removed (or to remove) and their total size in bytes.
        """
        if not dry_run:
            self._check_writable()
        with _db.translating_db_errors():
            with self._engine.connect() as conn:
                referenced = _referenced_digests(conn)
            candidates = [d for d in self.blobs.digests() if d not in referenced]
            doomed = [d for d in candidates if self.blobs.age(d) >= min_age]
            total = sum(self.blobs.size(d) for d in doomed)
            if not dry_run:
                with _db.write_transaction(self._engine) as conn:
                    for digest in doomed:
                        still = digest in _referenced_digests(conn)
                        if not still:
                            conn.execute(delete(Blob).where(Blob.digest == digest))
                            self.blobs.delete(digest)
        return GcReport(tuple(doomed), total, dry_run)

    def verify(self) -> VerifyReport:
        """Recomputes the digest of every blob the database refers to; lists the differences."""
        with _db.translating_db_errors(), self._engine.connect() as conn:
            referenced = sorted(_referenced_digests(conn))
        missing: builtins.list[str] = []
        corrupt: builtins.list[str] = []
        for digest in referenced:
            try:
                self.read_blob(digest)
            except IntegrityError as e:
                (missing if e.found is None else corrupt).append(digest)
        stored = set(self.blobs.digests())
        unreferenced = tuple(sorted(stored - set(referenced)))
        return VerifyReport(len(referenced), tuple(missing), tuple(corrupt), unreferenced)

    def audit(
        self,
        reference: str | None = None,
        *,
        platform: Any = _LOCAL,
        store: bool = True,
        python: str | os.PathLike[str] | None = None,
    ) -> builtins.list[Finding]:
        """Audits variants with the running jax: load, compile, (golden) — see ``_audit``.

        Args:
            reference: ``NAME:VERSION`` / ``NAME@ALIAS`` (that version), ``NAME`` (all its
                versions) or None (every version in the registry).
            platform: the platform to audit for; default the local jax backend.
            store: record the findings in the registry (``audit_results``).
            python: audit with the jax of another Python environment: an interpreter where
                jaxport and another jax release are installed. It opens this registry (its
                URL and blob store) itself and stores its findings there.

        Returns:
            One Finding per variant.

        Raises:
            RegistryError: the other interpreter could not run the audit.
        """
        if python is not None:
            return self._audit_in(os.fspath(python), reference, platform, store)
        import jax

        platform = local_platform() if platform is _LOCAL else platform
        jax_version, jaxlib_version = _compat.jax_versions()
        findings = []
        for ref in self._audit_targets(reference):
            golden_digest = self._examples_digest(ref.name, ref.version)
            for v in ref.variants:
                try:
                    data = self.read_blob(v.digest)
                    golden = self.read_blob(golden_digest) if golden_digest else None
                    result = audit_archive(
                        data, platform=platform, nr_devices=jax.device_count(), examples=golden
                    )
                except IntegrityError as e:
                    result = AuditResult("error", f"IntegrityError: {e}", {}, 0.0)
                findings.append(
                    Finding(
                        name=ref.name,
                        version=ref.version,
                        digest=v.digest,
                        jax_version=jax_version,
                        jaxlib_version=jaxlib_version,
                        platform=platform,
                        status=result.status,
                        reason=result.reason,
                        checks=result.checks,
                        seconds=result.seconds,
                        created_at=time.time(),
                    )
                )
        if store and findings:
            self._check_writable()
            with _db.translating_db_errors(), _db.write_transaction(self._engine) as conn:
                conn.execute(insert(Audit), [_audit_row(f) for f in findings])
        return findings

    def _audit_in(
        self, python: str, reference: str | None, platform: Any, store: bool
    ) -> builtins.list[Finding]:
        import subprocess

        args = [python, "-m", "jaxport._cli", "--registry", self.url, "--blobs", self.blobs.url]
        args += ["audit", *([reference] if reference else []), "--json"]
        args += [] if platform is _LOCAL or platform is None else ["--platform", platform]
        args += [] if store else ["--no-store"]
        proc = subprocess.run(args, capture_output=True, text=True, check=False)
        if proc.returncode not in (0, 1) or not proc.stdout.strip().startswith("["):
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
            raise RegistryError(f"audit with {python} failed: {' | '.join(tail)}")
        return [Finding(**f) for f in json.loads(proc.stdout)]

    def _examples_digest(self, name: str, version: int) -> str | None:
        with _db.translating_db_errors(), self._engine.connect() as conn:
            return conn.execute(
                select(VersionExamples.digest)
                .join(Version, Version.id == VersionExamples.version_id)
                .join(Model, Model.id == Version.model_id)
                .where(Model.name == name, Version.version == version)
            ).scalar_one_or_none()

    def _audit_targets(self, reference: str | None) -> builtins.list[Ref]:
        if reference is None:
            return [r for n in self.names() for r in self.list(n, limit=1_000_000)]
        name, version, alias = parse_reference(reference)
        if version is None and alias is None:
            return self.list(name, limit=1_000_000)
        return [self.get(reference)]

    def audit_results(
        self,
        *,
        name: str | None = None,
        jax_version: str | None = None,
        platform: str | None = None,
        limit: int = 10_000,
    ) -> builtins.list[Finding]:
        """Stored findings, newest first, joined to the versions that hold each digest."""
        q = (
            select(Audit.__table__, Model.name.label("m_name"), Version.version.label("v_number"))
            .join(Variant, Variant.digest == Audit.digest)
            .join(Version, Variant.version_id == Version.id)
            .join(Model, Model.id == Version.model_id)
            .order_by(Audit.id.desc())
            .limit(limit)
        )
        for column, value in (
            (Model.name, name),
            (Audit.jax_version, jax_version),
            (Audit.platform, platform),
        ):
            if value is not None:
                q = q.where(column == value)
        with _db.translating_db_errors(), self._engine.connect() as conn:
            return [_finding(r) for r in conn.execute(q)]

    def upgrade_report(
        self,
        target: str | os.PathLike[str],
        reference: str | None = None,
        *,
        platform: str | None = None,
    ) -> builtins.list[UpgradeRow]:
        """What breaks if the running jax is replaced by ``target``.

        Args:
            target: a jax release whose findings are stored (``"0.7.0"``), or an interpreter
                path: then ``reference`` is audited there and here first.
            reference: limit to a name (``NAME``, ``NAME:V``, ``NAME@ALIAS`` use its name).
            platform: limit to findings for this platform.
        """
        import jax

        kwargs: dict[str, Any] = {} if platform is None else {"platform": platform}
        target = os.fspath(target)
        if Path(target).exists():
            elsewhere = self.audit(reference, python=target, **kwargs)
            self.audit(reference, **kwargs)
            target = elsewhere[0].jax_version if elsewhere else target
        name = parse_reference(reference)[0] if reference else None
        findings = self.audit_results(name=name, platform=platform)
        return compare_findings(findings, jax.__version__, target)

    def diff(self, a: str, b: str) -> builtins.list[Change]:
        """The changes from version ``a`` to version ``b`` (``NAME:V`` / ``NAME@ALIAS``),
        each classified breaking or compatible (see ``registry/_diff.py``)."""
        pairs = []
        for reference in (a, b):
            ref = self.get(reference)
            pairs.append([(v, inspect(self.read_blob(v.digest))) for v in ref.variants])
        return diff_variant_sets(pairs[0], pairs[1])

    # -- reading --------------------------------------------------------------------------

    def resolve(
        self,
        reference: str,
        *,
        version: int | None = None,
        platform: Any = _LOCAL,
        nr_devices: int | None = None,
    ) -> Resolution:
        """Chooses the variant ``pull`` would return, without downloading anything.

        The newest version (or the one asked for, by ``version``, ``NAME:N`` or ``NAME@ALIAS``)
        with a variant that runs on ``platform`` with ``nr_devices``; within it, an exact device
        count beats a 1-device unsharded export. Every variant not chosen, in that version and
        newer ones, is listed with the reason.

        Args:
            reference: ``NAME``, ``NAME:VERSION`` or ``NAME@ALIAS``.
            version: a version number (instead of one in ``reference``).
            platform: ``"cpu"``, ``"cuda"``, ``"rocm"``, ``"tpu"``; default the local jax
                backend; None: any.
            nr_devices: the device count to run on; None: any.

        Raises:
            NotFoundError: no such name, version or alias.
            InvalidNameError: a malformed reference.
        """
        name, ref_version, alias = parse_reference(reference)
        version = version if version is not None else ref_version
        platform = local_platform() if platform is _LOCAL else platform
        with _db.translating_db_errors(), self._engine.connect() as conn:
            model_id = self._model_id(conn, name)
            if alias is not None:
                version = self._alias_version(conn, model_id, name, alias)
            if version is not None:
                self._version_id(conn, model_id, name, version)
            chosen = self._best_variant(conn, model_id, name, version, platform, nr_devices)
            rejected = self._rejections(conn, model_id, name, version, chosen, platform, nr_devices)
        return Resolution(name, platform, nr_devices, chosen, tuple(rejected))

    def pull(
        self,
        reference: str,
        *,
        version: int | None = None,
        platform: Any = _LOCAL,
        nr_devices: int | None = None,
    ) -> Any:
        """The ``jax.export.Exported`` that ``resolve`` chooses, digest verified.

        Raises:
            NotFoundError: nothing matches; the message lists the versions, platforms and
                device counts that exist.
            IntegrityError: the blob is missing or does not match its digest; nothing is returned.
            (and see ``resolve`` and ``jaxport.loads``)
        """
        return loads(
            self.pull_bytes(reference, version=version, platform=platform, nr_devices=nr_devices)
        )

    def pull_bytes(
        self,
        reference: str,
        *,
        version: int | None = None,
        platform: Any = _LOCAL,
        nr_devices: int | None = None,
    ) -> bytes:
        """The archive bytes of the variant ``resolve`` chooses, digest verified (see ``pull``)."""
        resolution = self.resolve(
            reference, version=version, platform=platform, nr_devices=nr_devices
        )
        if resolution.chosen is None:
            raise NotFoundError(self._nothing_matches(resolution))
        return self.read_blob(resolution.chosen.digest)

    def read_blob(self, digest: str) -> bytes:
        """A blob's bytes, verified against its digest.

        Raises:
            IntegrityError: the blob is missing or corrupt.
        """
        try:
            data = self.blobs.get(digest)
        except FileNotFoundError:
            raise IntegrityError(
                f"blob {digest} is missing from {self.blobs.url}", expected=digest
            ) from None
        return verify(digest, data)

    def list(
        self, name: str | None = None, *, limit: int = 100, after: tuple[str, int] | None = None
    ) -> builtins.list[Ref]:
        """Versions in ``(name, version)`` order, one page (keyset pagination).

        Args:
            name: only this name's versions.
            limit: page size.
            after: the ``(name, version)`` of the last item of the previous page.
        """
        q = (
            select(Model.name, Version.version)
            .join(Version, Version.model_id == Model.id)
            .order_by(Model.name, Version.version)
            .limit(limit)
        )
        if name is not None:
            q = q.where(Model.name == check_name(name))
        if after is not None:
            a_name, a_version = after
            q = q.where(
                or_(Model.name > a_name, and_(Model.name == a_name, Version.version > a_version))
            )
        with _db.translating_db_errors(), self._engine.connect() as conn:
            pairs = conn.execute(q).all()
            return [self._ref_on(conn, n, v) for n, v in pairs]

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

        ``nr_devices`` follows the device rule of ``resolve``. ``after`` is the
        ``variant_id`` of the last item of the previous page.
        """
        q = (
            select(Variant.__table__, Version.version.label("v_number"), Model.name.label("m_name"))
            .join(Version, Variant.version_id == Version.id)
            .join(Model, Model.id == Version.model_id)
            .order_by(Variant.id)
            .limit(limit)
        )
        if name is not None:
            q = q.where(Model.name == name)
        if platform is not None:
            q = q.where(_has_platform(platform))
        if nr_devices is not None:
            q = q.where(_runs_on_devices(nr_devices))
        for column, value in (
            (Variant.jax_version, jax_version),
            (Variant.calling_convention_version, calling_convention_version),
            (Variant.fun_name, fun_name),
            (Variant.shape_polymorphic, shape_polymorphic),
        ):
            if value is not None:
                q = q.where(column == value)
        if after is not None:
            q = q.where(Variant.id > after)
        with _db.translating_db_errors(), self._engine.connect() as conn:
            return [VariantInfo.from_row(r.m_name, r.v_number, r) for r in conn.execute(q)]

    def get(self, reference: str) -> Ref:
        """The version ``NAME:VERSION`` or ``NAME@ALIAS`` names; the newest for a bare ``NAME``.

        Raises:
            NotFoundError: no such name, version or alias, or a name without versions.
            InvalidNameError: a malformed reference.
        """
        name, version, alias = parse_reference(reference)
        with _db.translating_db_errors(), self._engine.connect() as conn:
            model_id = self._model_id(conn, name)
            if alias is not None:
                version = self._alias_version(conn, model_id, name, alias)
            if version is None:
                version = conn.execute(
                    select(func.max(Version.version)).where(Version.model_id == model_id)
                ).scalar()
                if version is None:
                    raise NotFoundError(f"{name} has no versions")
            self._version_id(conn, model_id, name, version)
            return self._ref_on(conn, name, version)

    def names(self) -> builtins.list[str]:
        """Every name, sorted."""
        with _db.translating_db_errors(), self._engine.connect() as conn:
            return list(conn.execute(select(Model.name).order_by(Model.name)).scalars())

    def aliases(self, name: str) -> dict[str, int]:
        """``name``'s aliases and the versions they point at."""
        with _db.translating_db_errors(), self._engine.connect() as conn:
            model_id = self._model_id(conn, name)
            rows = conn.execute(
                select(Alias.alias, Alias.version).where(Alias.model_id == model_id)
            )
            return {a: v for a, v in rows}

    # -- helpers --------------------------------------------------------------------------

    def _ref(self, name: str, version: int) -> Ref:
        with self._engine.connect() as conn:
            return self._ref_on(conn, name, version)

    @staticmethod
    def _ref_on(conn: Connection, name: str, version: int) -> Ref:
        rows = conn.execute(
            select(Variant.__table__)
            .join(Version, Variant.version_id == Version.id)
            .join(Model, Model.id == Version.model_id)
            .where(Model.name == name, Version.version == version)
            .order_by(Variant.id)
        )
        return Ref(name, version, tuple(VariantInfo.from_row(name, version, r) for r in rows))

    def _model_id(self, conn: Connection, name: str, *, lock: bool = False) -> int:
        q = select(Model.id).where(Model.name == check_name(name))
        # FOR UPDATE on PostgreSQL; SQLite's write transactions (BEGIN IMMEDIATE) already queue.
        model_id = conn.execute(q.with_for_update() if lock else q).scalar_one_or_none()
        if model_id is None:
            known = conn.execute(select(Model.name).order_by(Model.name).limit(20)).scalars().all()
            raise NotFoundError(f"no artifact named {name!r}; names: {', '.join(known) or 'none'}")
        return int(model_id)

    def _version_id(self, conn: Connection, model_id: int, name: str, version: int) -> int:
        version_id = conn.execute(
            select(Version.id).where(Version.model_id == model_id, Version.version == version)
        ).scalar_one_or_none()
        if version_id is None:
            raise NotFoundError(
                f"{name} has no version {version}; versions: {self._versions_text(conn, model_id)}"
            )
        return int(version_id)

    @staticmethod
    def _versions_text(conn: Connection, model_id: int) -> str:
        versions = (
            conn.execute(
                select(Version.version)
                .where(Version.model_id == model_id)
                .order_by(Version.version)
            )
            .scalars()
            .all()
        )
        return ", ".join(map(str, versions)) or "none"

    def _alias_version(self, conn: Connection, model_id: int, name: str, alias: str) -> int:
        version = conn.execute(
            select(Alias.version).where(Alias.model_id == model_id, Alias.alias == alias)
        ).scalar_one_or_none()
        if version is None:
            known = (
                conn.execute(select(Alias.alias).where(Alias.model_id == model_id)).scalars().all()
            )
            raise NotFoundError(
                f"{name} has no alias {alias!r}; aliases: {', '.join(sorted(known)) or 'none'}"
            )
        return int(version)

    @staticmethod
    def _variants_query(model_id: int, version: int | None) -> Any:
        q = (
            select(Variant.__table__, Version.version.label("v_number"))
            .join(Version, Variant.version_id == Version.id)
            .where(Version.model_id == model_id)
        )
        return q if version is None else q.where(Version.version == version)

    def _best_variant(
        self,
        conn: Connection,
        model_id: int,
        name: str,
        version: int | None,
        platform: str | None,
        nr_devices: int | None,
    ) -> VariantInfo | None:
        q = self._variants_query(model_id, version)
        if platform is not None:
            q = q.where(_has_platform(platform))
        order: list[Any] = [Version.version.desc()]
        if nr_devices is not None:
            q = q.where(_runs_on_devices(nr_devices))
            order.append((Variant.nr_devices == nr_devices).desc())
        row = conn.execute(q.order_by(*order, Variant.id).limit(1)).first()
        return None if row is None else VariantInfo.from_row(name, row.v_number, row)

    def _rejections(
        self,
        conn: Connection,
        model_id: int,
        name: str,
        version: int | None,
        chosen: VariantInfo | None,
        platform: str | None,
        nr_devices: int | None,
    ) -> builtins.list[Rejection]:
        q = self._variants_query(model_id, version)
        if chosen is not None:
            q = q.where(Version.version >= chosen.version, Variant.id != chosen.variant_id)
        rows = conn.execute(q.order_by(Version.version.desc(), Variant.id).limit(_MAX_REJECTIONS))
        out = []
        for row in rows:
            v = row.v_number
            info = VariantInfo.from_row(name, v, row)
            reason = info.runs_on(platform, nr_devices)
            if reason is None:
                reason = "an earlier variant of the same version matched first"
                if chosen is not None and v > chosen.version:  # pragma: no cover - defensive
                    reason = "not chosen"
            out.append(Rejection(info, reason))
        return out

    def _nothing_matches(self, r: Resolution) -> str:
        wanted = f"platform {r.platform or 'any'}"
        if r.nr_devices is not None:
            wanted += f" with {r.nr_devices} devices"
        versions = sorted({x.variant.version for x in r.rejected})
        platforms = sorted({p for x in r.rejected for p in x.variant.platforms})
        devices = sorted({x.variant.nr_devices for x in r.rejected})
        return (
            f"no variant of {r.name!r} runs on {wanted}; it has versions "
            f"{', '.join(map(str, versions)) or 'none'}, "
            f"platforms {', '.join(platforms) or 'none'}, "
            f"device counts {', '.join(map(str, devices)) or 'none'}"
        )


def schema_revision(url: str) -> tuple[str | None, str]:
    """``(the database's alembic revision or None, the revision this jaxport writes)``."""
    engine = _db.create_registry_engine(url)
    try:
        with _db.translating_db_errors(), engine.connect() as conn:
            return _db.current_revision(conn), HEAD
    finally:
        engine.dispose()


def upgrade_database(url: str) -> tuple[str | None, str]:
    """Upgrades a registry database to this jaxport's schema: ``(revision before, after)``.

    An empty database is created at head.
    """
    engine = _db.create_registry_engine(url)
    try:
        with _db.translating_db_errors():
            return _db.upgrade(engine), HEAD
    finally:
        engine.dispose()


def _referenced_digests(conn: Connection) -> set[str]:
    variants = conn.execute(select(Variant.digest).distinct()).scalars()
    examples = conn.execute(select(VersionExamples.digest).distinct()).scalars()
    return set(variants) | set(examples)


def _golden_blob(items: Sequence[Any], examples: Sequence[Any]) -> tuple[str, bytes]:
    """``(digest, npz bytes)`` of the examples, with outputs computed where not given."""
    import jax

    runner = next((e for e in items if local_platform() in e.platforms and e.nr_devices == 1), None)
    flat = []
    for example in examples:
        ex = example if isinstance(example, Example) else Example(*example)
        ins = jax.tree.leaves((tuple(ex.args), dict(ex.kwargs)))
        outputs = ex.outputs
        if outputs is None:
            if runner is None:
                raise UnsupportedFeatureError(
                    "no variant runs here to compute the examples' outputs: pass "
                    "jaxport.Example(args, kwargs, outputs) with the producer's outputs"
                )
            outputs = runner.call(*ex.args, **ex.kwargs)
        flat.append((ins, jax.tree.leaves(outputs)))
    data = encode_examples(flat)
    return hashlib.sha256(data).hexdigest(), data


def _audit_row(f: Finding) -> dict[str, Any]:
    return {
        "digest": f.digest,
        "jax_version": f.jax_version,
        "jaxlib_version": f.jaxlib_version,
        "platform": f.platform,
        "status": f.status,
        "reason": f.reason,
        "details_json": json.dumps(f.checks, sort_keys=True),
        "seconds": f.seconds,
        "created_at": f.created_at,
    }


def _finding(audit: Any) -> Finding:
    return Finding(
        audit.m_name, audit.v_number, audit.digest, audit.jax_version, audit.jaxlib_version,
        audit.platform, audit.status, audit.reason, json.loads(audit.details_json),
        audit.seconds, audit.created_at,
    )  # fmt: skip


def _has_platform(platform: str) -> Any:
    return exists().where(
        VariantPlatform.variant_id == Variant.id, VariantPlatform.platform == platform
    )


def _runs_on_devices(nr_devices: int) -> Any:
    # jax's call-time rule: exactly N devices, or 1 device with no shardings (runs on any count).
    return or_(
        Variant.nr_devices == nr_devices, and_(Variant.nr_devices == 1, Variant.sharded.is_(False))
    )


def _default_blobs(url: str) -> Path:
    if url.startswith("sqlite:///") and url != "sqlite:///:memory:":
        return Path(url.removeprefix("sqlite:///")).resolve().parent / "blobs"
    if url.startswith("sqlite"):
        return default_home() / "blobs"
    raise ValueError(f"blobs= is required for a registry on {url.split(':', 1)[0]}")


def _signature(avals: Any) -> str:
    return "; ".join(f"{a.path or '.'}: {a.dtype}[{', '.join(map(str, a.shape))}]" for a in avals)


def _variant_row(
    version_id: int, digest: str, size: int, info: ArchiveInfo, now: float, meta_json: str
) -> dict[str, Any]:
    avals = (*info.in_avals, *info.out_avals)
    return {
        "version_id": version_id,
        "digest": digest,
        "fun_name": info.fun_name,
        "platforms": ",".join(info.platforms),
        "nr_devices": info.nr_devices,
        "sharded": any(a.sharding is not None for a in avals),
        "calling_convention_version": info.calling_convention_version,
        "format_version": info.format_version,
        "jax_version": info.jax_version,
        "jaxlib_version": info.jaxlib_version,
        "vjp_order": info.vjp_order,
        "shape_polymorphic": any(isinstance(d, str) for a in avals for d in a.shape),
        "custom_call_targets": json.dumps(list(info.custom_call_targets)),
        "size_bytes": size,
        "in_signature": _signature(info.in_avals),
        "out_signature": _signature(info.out_avals),
        "created_at": now,
        "metadata_json": meta_json,
    }
