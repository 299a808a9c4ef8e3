"""The registry's tables (SQLAlchemy 2 declarative models).

    models ─< versions ─< variants >─ blobs ─< audits (by digest)
       │                     ├─< variant_platforms
       │                     └─< variant_parts >─ blobs   (model archives)
       └─< aliases, alias_history, alias_gates   pending_blobs (digests of pushes in flight)
                                           module_verdicts (the module sandbox's, by digest)
    blobs ─< signatures >─ blobs   (an archive's digest, the Sigstore bundle that signs it)
    blobs ─< compiled ─< compiled_files >─ blobs  (an archive's compiled executables, signed)
    audits ─< queued_audits        (the finding each key of the audit queue recorded, once)
    tokens, events                 (the registry server's bearer tokens; the append-only log)
    uploads                        (the parts each token uploaded lately: ``registry/_reach.py``)
    versions ─< versions           (lineage: ``derived_from_id``)
    retention_policies, jax_releases (by name prefix; the releases the watcher has seen)

A *name* (``models``) has immutable integer *versions*; a version holds *variants*, one archive
each, indexed in typed columns; archives are *blobs* stored once by sha256 digest. A model
archive (``variants.kind == "model"``) is stored in parts (``variant_parts``): its skeleton and
each tensor is a blob of its own, so versions share the tensors they have in common; its own
digest has a ``blobs`` row without a file (``_model_parts``). Times are
unix seconds (float). Constraint names follow one naming convention so migrations are stable.

Each row class is named after its table with a ``Row`` suffix (``models``: ``NameRow``, a
name's row; ``examples``: ``ExamplesRow``), so that none shares a name with a public type
(``jaxport.Model``, ``jaxport.Event``, ``jaxport.Signature``, ``jaxport.AliasMove``).
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

__all__ = [
    "JAX_VERSION",
    "STABLEHLO_VERSION_CHARS",
    "AliasGateRow",
    "AliasMoveRow",
    "AliasRow",
    "AuditRow",
    "Base",
    "BlobRow",
    "CompiledFileRow",
    "CompiledRow",
    "EventRow",
    "ExamplesRow",
    "JaxReleaseRow",
    "ModuleVerdictRow",
    "NameRow",
    "PendingBlobRow",
    "QueuedAuditRow",
    "RegistryInfoRow",
    "RetentionPolicyRow",
    "SignatureRow",
    "TokenRow",
    "UploadRow",
    "VariantPartRow",
    "VariantPlatformRow",
    "VariantRow",
    "VersionRow",
]

NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

#: The type of ``variants.jax_version``: bytewise comparison on both backends.
JAX_VERSION = String(40).with_variant(String(40, collation="C"), "postgresql")


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)


class NameRow(Base):
    """A name; ``last_version`` is the last version number handed out (0: none yet)."""

    __tablename__ = "models"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    last_version: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[float] = mapped_column(Float)


class VersionRow(Base):
    """A version of a name. ``content_key`` (``_publish.content_key``: sha256 of its variants'
    digests in order and its golden examples' digest) is unique per name, so identical content
    pushed at the same moment by several writers is one version; NULL only on versions that an
    older jaxport made twice (kept as they are by revision 0005)."""

    __tablename__ = "versions"
    __table_args__ = (
        UniqueConstraint("model_id", "version"),
        Index("ix_versions_content_key", "content_key", "model_id", unique=True),
    )
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    model_id: Mapped[int] = mapped_column(ForeignKey("models.id", ondelete="CASCADE"))
    version: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[float] = mapped_column(Float)
    metadata_json: Mapped[str] = mapped_column(Text, default="{}")
    content_key: Mapped[str | None] = mapped_column(String(64), nullable=True)
    # Lineage (revision 0015, ``registry/_lineage.py``): the version this one derives from and
    # how (``update_params``, ``rescue``, ``examples``, ``explicit``); NULL: none recorded.
    # No foreign key: adding one rebuilds ``versions`` on SQLite, whose drop would cascade to
    # every variant; an id whose version is gone reads as a deleted source.
    derived_from_id: Mapped[int | None] = mapped_column(Integer, nullable=True, index=True)
    derivation: Mapped[str | None] = mapped_column(String(40), nullable=True)
    # Provenance captured at push where available (NULL: not known).
    git_commit: Mapped[str | None] = mapped_column(String(64), nullable=True)
    function_qualname: Mapped[str | None] = mapped_column(Text, nullable=True)
    pushed_jax_version: Mapped[str | None] = mapped_column(String(40), nullable=True)
    pushed_jaxlib_version: Mapped[str | None] = mapped_column(String(40), nullable=True)
    pushed_host: Mapped[str | None] = mapped_column(String(255), nullable=True)
    pushed_by: Mapped[str | None] = mapped_column(String(200), nullable=True)
    # Retention (``registry/_retention.py``): soft-deleted at, restorable until; NULL: live.
    deleted_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    restorable_until: Mapped[float | None] = mapped_column(Float, nullable=True)


class BlobRow(Base):
    """A blob in the blob store, by sha256 digest (hex): an archive, golden examples, or a
    part of a model archive; ``size`` in bytes. A model archive's own digest has a row (the
    variants' foreign key) but no file: its bytes are its parts."""

    __tablename__ = "blobs"
    digest: Mapped[str] = mapped_column(String(64), primary_key=True)
    size: Mapped[int] = mapped_column(BigInteger)
    created_at: Mapped[float] = mapped_column(Float)


class PendingBlobRow(Base):
    """A digest that a push in flight writes or reuses (see ``_publish``): ``gc`` keeps its blob.

    ``token`` names the push, ``host`` and ``pid`` the process that runs it; its rows are
    deleted in the push's final transaction (or when it fails). Rows of a process that is gone
    (same host, no such pid) are dead at once; others expire after ``PENDING_TTL`` seconds.
    """

    __tablename__ = "pending_blobs"
    __table_args__ = (
        Index("ix_pending_blobs_digest", "digest"),
        Index("ix_pending_blobs_token", "token"),
    )
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    digest: Mapped[str] = mapped_column(String(64))
    token: Mapped[str] = mapped_column(String(32))
    host: Mapped[str] = mapped_column(String(255))
    pid: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[float] = mapped_column(Float)


#: The longest StableHLO version ``variants.stablehlo_version`` holds (revision 0017).
STABLEHLO_VERSION_CHARS = 40


class VariantRow(Base):
    """One archive of a version, with what ``resolve`` and ``search`` filter on."""

    __tablename__ = "variants"
    __table_args__ = (
        Index("ix_variants_version_id", "version_id"),
        Index("ix_variants_digest", "digest"),
        # search(name=...): a page of one name's variants in variant_id order (revision 0012).
        Index("ix_variants_model_id", "model_id", "id"),
        # search(fun_name=...): hash on PostgreSQL (unbounded text; see revision 0011).
        Index("ix_variants_fun_name", "fun_name", postgresql_using="hash"),
        # search driven by one of these alone (revision 0013; ``_search``). Queries that
        # filter on them otherwise write them ``unindexed``: SQLite keeps no statistics and
        # would pick these low-cardinality indexes over the selective paths.
        Index("ix_variants_jax_version", "jax_version", "id"),
        Index("ix_variants_calling_convention", "calling_convention_version", "id"),
        Index("ix_variants_shape_polymorphic", "shape_polymorphic", "id"),
        Index("ix_variants_nr_devices", "nr_devices", "id"),
    )
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    version_id: Mapped[int] = mapped_column(ForeignKey("versions.id", ondelete="CASCADE"))
    #: The name's ``models.id`` (its version's ``model_id``, kept here for ``search(name=)``).
    model_id: Mapped[int] = mapped_column(Integer)
    digest: Mapped[str] = mapped_column(ForeignKey("blobs.digest"))
    fun_name: Mapped[str] = mapped_column(Text)
    platforms: Mapped[str] = mapped_column(Text)  # comma-separated, in the Exported's order
    nr_devices: Mapped[int] = mapped_column(Integer)
    sharded: Mapped[bool] = mapped_column(Boolean)
    calling_convention_version: Mapped[int] = mapped_column(Integer)
    format_version: Mapped[int] = mapped_column(Integer)
    #: Compared bytewise on both backends (collation "C" on PostgreSQL, revision 0013), so
    #: that the versions starting with ``P.`` are one range.
    jax_version: Mapped[str] = mapped_column(JAX_VERSION)
    jaxlib_version: Mapped[str] = mapped_column(String(40))
    vjp_order: Mapped[int] = mapped_column(Integer)
    shape_polymorphic: Mapped[bool] = mapped_column(Boolean)
    custom_call_targets: Mapped[str] = mapped_column(Text)  # JSON list
    size_bytes: Mapped[int] = mapped_column(BigInteger)
    in_signature: Mapped[str] = mapped_column(Text)
    out_signature: Mapped[str] = mapped_column(Text)
    created_at: Mapped[float] = mapped_column(Float)
    metadata_json: Mapped[str] = mapped_column(Text, default="{}")
    kind: Mapped[str] = mapped_column(String(20), server_default="function")  # or "model"
    #: The newest StableHLO version among the variant's modules (their bytecode's producer
    #: string); None: pushed before revision 0017, or no module declares one.
    stablehlo_version: Mapped[str | None] = mapped_column(
        String(STABLEHLO_VERSION_CHARS), nullable=True
    )


class VariantPartRow(Base):
    """A part of a model archive: ``position`` 0 is the skeleton (bytes 0 to the end of
    section 0), ``position`` i + 1 tensor i. The archive is the parts in position order, each at
    its ``offset`` (bytes from the archive's start) after zero padding; ``size`` in bytes."""

    __tablename__ = "variant_parts"
    __table_args__ = (Index("ix_variant_parts_digest", "digest"),)
    variant_id: Mapped[int] = mapped_column(
        ForeignKey("variants.id", ondelete="CASCADE"), primary_key=True
    )
    position: Mapped[int] = mapped_column(Integer, primary_key=True)
    digest: Mapped[str] = mapped_column(ForeignKey("blobs.digest"))
    offset: Mapped[int] = mapped_column(BigInteger)
    size: Mapped[int] = mapped_column(BigInteger)


class VariantPlatformRow(Base):
    """The set of platforms of a variant, one row each, for indexed lookups."""

    __tablename__ = "variant_platforms"
    __table_args__ = (Index("ix_variant_platforms_platform", "platform", "variant_id"),)
    variant_id: Mapped[int] = mapped_column(
        ForeignKey("variants.id", ondelete="CASCADE"), primary_key=True
    )
    platform: Mapped[str] = mapped_column(String(40), primary_key=True)


class AliasRow(Base):
    __tablename__ = "aliases"
    model_id: Mapped[int] = mapped_column(
        ForeignKey("models.id", ondelete="CASCADE"), primary_key=True
    )
    alias: Mapped[str] = mapped_column(String(200), primary_key=True)
    version: Mapped[int] = mapped_column(Integer)
    updated_at: Mapped[float] = mapped_column(Float)


class AliasMoveRow(Base):
    """The history of alias moves; ``to_version`` None: the alias was removed."""

    __tablename__ = "alias_history"
    __table_args__ = (Index("ix_alias_history_model_id_alias", "model_id", "alias"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    model_id: Mapped[int] = mapped_column(ForeignKey("models.id", ondelete="CASCADE"))
    alias: Mapped[str] = mapped_column(String(200))
    from_version: Mapped[int | None] = mapped_column(Integer, nullable=True)
    to_version: Mapped[int | None] = mapped_column(Integer, nullable=True)
    moved_at: Mapped[float] = mapped_column(Float)


class AliasGateRow(Base):
    """The gates of a protected alias (revision 0015, ``registry/_gates.py``): a move to a
    version that fails any is refused. ``require_signature``: a key or certificate identity
    (NULL: none); ``require_audit``: the status every targeted finding must have (``ok``; NULL:
    none); ``jax_releases``, ``platforms``: comma-separated targets of that audit gate;
    ``require_goldens``: the version must hold golden examples."""

    __tablename__ = "alias_gates"
    model_id: Mapped[int] = mapped_column(
        ForeignKey("models.id", ondelete="CASCADE"), primary_key=True
    )
    alias: Mapped[str] = mapped_column(String(200), primary_key=True)
    require_signature: Mapped[str | None] = mapped_column(Text, nullable=True)
    require_audit: Mapped[str | None] = mapped_column(String(20), nullable=True)
    jax_releases: Mapped[str] = mapped_column(Text, default="")
    platforms: Mapped[str] = mapped_column(Text, default="")
    require_goldens: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[float] = mapped_column(Float)
    created_by: Mapped[str] = mapped_column(String(200))


class RetentionPolicyRow(Base):
    """A retention policy for the names under ``prefix`` (revision 0015,
    ``registry/_retention.py``); NULL columns keep nothing by that rule. Ages in seconds."""

    __tablename__ = "retention_policies"
    prefix: Mapped[str] = mapped_column(String(200), primary_key=True)
    keep_last: Mapped[int | None] = mapped_column(Integer, nullable=True)
    keep_younger_than: Mapped[float | None] = mapped_column(Float, nullable=True)
    keep_ok_per_target: Mapped[bool] = mapped_column(Boolean, default=True)
    restore_period: Mapped[float] = mapped_column(Float)
    created_at: Mapped[float] = mapped_column(Float)


class JaxReleaseRow(Base):
    """A jax or jaxlib release the watcher has seen on the package index (revision 0015,
    ``audit/_watch.py``); ``uploaded_at`` from the index where it says (unix seconds)."""

    __tablename__ = "jax_releases"
    package: Mapped[str] = mapped_column(String(20), primary_key=True)
    version: Mapped[str] = mapped_column(String(40), primary_key=True)
    seen_at: Mapped[float] = mapped_column(Float)
    uploaded_at: Mapped[float | None] = mapped_column(Float, nullable=True)


class RegistryInfoRow(Base):
    """Facts about the database itself, e.g. ``jaxport_version``: the release that last created
    or upgraded its schema (named in the error an older jaxport gives)."""

    __tablename__ = "registry_info"
    key: Mapped[str] = mapped_column(String(100), primary_key=True)
    value: Mapped[str] = mapped_column(Text)


class AuditRow(Base):
    """An audit of one variant's archive by one jax / jaxlib on one platform (``jaxport audit``).

    ``status``: one of ``jaxport.audit.STATUSES``; ``seconds``: how long the
    audit took; ``details_json``: each check's outcome; ``level``: ``"full"`` (loaded and
    compiled) or ``"static"`` (recorded facts only); ``devices``: how many devices of the
    platform the auditing host had (None: unknown); ``examples_digest``: the golden examples
    re-run (None: none). Reused by digest x examples x level x jax x jaxlib x platform x devices.
    """

    __tablename__ = "audits"
    __table_args__ = (
        Index("ix_audits_digest", "digest", "jax_version", "platform"),
        Index("ix_audits_key", "digest", "level", "jax_version", "platform"),
    )
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    digest: Mapped[str] = mapped_column(String(64))
    jax_version: Mapped[str] = mapped_column(String(40))
    jaxlib_version: Mapped[str] = mapped_column(String(40))
    platform: Mapped[str] = mapped_column(String(40))
    status: Mapped[str] = mapped_column(String(20))
    reason: Mapped[str] = mapped_column(Text)
    details_json: Mapped[str] = mapped_column(Text)
    seconds: Mapped[float] = mapped_column(Float)
    created_at: Mapped[float] = mapped_column(Float)
    level: Mapped[str] = mapped_column(String(20), server_default="full")
    devices: Mapped[int | None] = mapped_column(Integer, nullable=True)
    examples_digest: Mapped[str | None] = mapped_column(String(64), nullable=True)


class ExamplesRow(Base):
    """The golden examples of a version: a blob (see ``_examples``) of ``count`` calls."""

    __tablename__ = "examples"
    version_id: Mapped[int] = mapped_column(
        ForeignKey("versions.id", ondelete="CASCADE"), primary_key=True
    )
    digest: Mapped[str] = mapped_column(ForeignKey("blobs.digest"))
    count: Mapped[int] = mapped_column(Integer)


class ModuleVerdictRow(Base):
    """What the module sandbox said of a module (``jaxport.export._verdicts``), recorded at push
    so that a pull by another client with the same jaxlib does not parse the module again.

    ``digest``: the module's own sha256 (not an archive's); ``verdict_json``: the facts, or
    MLIR's refusal. Crashes and time-outs are never recorded (a push that meets one fails).
    """

    __tablename__ = "module_verdicts"
    digest: Mapped[str] = mapped_column(String(64), primary_key=True)
    jaxlib_version: Mapped[str] = mapped_column(String(40), primary_key=True)
    facts_version: Mapped[int] = mapped_column(Integer, primary_key=True)
    verdict_json: Mapped[str] = mapped_column(Text)
    created_at: Mapped[float] = mapped_column(Float)


class SignatureRow(Base):
    """A signature of an archive (``digest``, a variant's): a Sigstore bundle that the OpenSSF
    ``model-signing`` library wrote, stored as the blob ``bundle_digest``, like an OCI referrer.
    ``signer`` is the sha256 (hex) of the signing public key's DER SubjectPublicKeyInfo;
    ``kind`` is ``key`` or ``certificate``. One row per archive and signer (``_signatures``)."""

    __tablename__ = "signatures"
    __table_args__ = (
        UniqueConstraint("digest", "signer"),
        Index("ix_signatures_bundle_digest", "bundle_digest"),
    )
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    digest: Mapped[str] = mapped_column(ForeignKey("blobs.digest"))
    bundle_digest: Mapped[str] = mapped_column(ForeignKey("blobs.digest"))
    signer: Mapped[str] = mapped_column(String(64))
    kind: Mapped[str] = mapped_column(String(20))
    created_at: Mapped[float] = mapped_column(Float)


class QueuedAuditRow(Base):
    """The finding that the audit queue (``registry/_queue_jobs.py``) recorded for one key:
    archive ``digest`` x ``jax_version`` x ``jaxlib_version`` x ``platform`` x ``nr_devices``
    (the devices the variant needs). The key is the primary key, so a job retried after its
    worker was killed, or enqueued twice, never records a second finding; ``job_id`` is the
    procrastinate job that recorded it."""

    __tablename__ = "queued_audits"
    digest: Mapped[str] = mapped_column(String(64), primary_key=True)
    jax_version: Mapped[str] = mapped_column(String(40), primary_key=True)
    jaxlib_version: Mapped[str] = mapped_column(String(40), primary_key=True)
    platform: Mapped[str] = mapped_column(String(40), primary_key=True)
    nr_devices: Mapped[int] = mapped_column(Integer, primary_key=True)
    audit_id: Mapped[int] = mapped_column(ForeignKey("audits.id", ondelete="CASCADE"))
    job_id: Mapped[int | None] = mapped_column(BigInteger)


class TokenRow(Base):
    """A bearer token of the registry server (``registry/_tokens.py``): the sha256 of its secret
    (never the secret), its scopes and name prefixes (space-separated), times in unix seconds."""

    __tablename__ = "tokens"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    secret_sha256: Mapped[str] = mapped_column(String(64), unique=True)
    scopes: Mapped[str] = mapped_column(String(100))
    prefixes: Mapped[str] = mapped_column(Text)
    created_at: Mapped[float] = mapped_column(Float)
    expires_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    revoked_at: Mapped[float | None] = mapped_column(Float, nullable=True)


class UploadRow(Base):
    """A part a token uploaded to the registry server (``registry/_reach.py``): a commit by a
    prefix-limited token may name it for ``UPLOAD_TTL`` seconds after ``created_at`` (unix
    seconds). ``token`` is the token's name; a row per (token, digest), renewed by a new
    upload."""

    __tablename__ = "uploads"
    __table_args__ = (Index("ix_uploads_created_at", "created_at"),)
    token: Mapped[str] = mapped_column(String(200), primary_key=True)
    digest: Mapped[str] = mapped_column(String(64), primary_key=True)
    created_at: Mapped[float] = mapped_column(Float)


class EventRow(Base):
    """One write to the registry (``registry/_events.py``), appended, never changed: ``actor``
    (a token's name, or ``local:USER``), ``kind``, name, version and a JSON ``detail``."""

    __tablename__ = "events"
    __table_args__ = (Index("ix_events_name_id", "name", "id"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    at: Mapped[float] = mapped_column(Float)
    actor: Mapped[str] = mapped_column(String(200))
    kind: Mapped[str] = mapped_column(String(40))
    name: Mapped[str | None] = mapped_column(String(200), nullable=True)
    version: Mapped[int | None] = mapped_column(Integer, nullable=True)
    detail: Mapped[str] = mapped_column(Text)


class CompiledRow(Base):
    """A set of compiled executables of one method of an archive (``digest``, a variant's):
    the files jax's persistent compilation cache wrote when compiling it on a host of this
    ``platform``, ``device_kind``, jax and jaxlib release and compile options (``options``:
    JSON; ``options_digest`` its sha256), for ``nr_devices`` devices. ``manifest_digest`` is
    the blob of the set's JSON manifest (every key field and file), whose sha256 the Sigstore
    bundle ``bundle_digest`` signs (by ``signer``, a key fingerprint). One row per key
    (``registry/_compiled_store.py``); ``method`` is "" for a function archive."""

    __tablename__ = "compiled"
    __table_args__ = (
        UniqueConstraint(
            "digest", "method", "platform", "device_kind", "jax_version", "jaxlib_version",
            "options_digest",
        ),
        Index("ix_compiled_bundle_digest", "bundle_digest"),
    )  # fmt: skip
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    digest: Mapped[str] = mapped_column(ForeignKey("blobs.digest"))
    method: Mapped[str] = mapped_column(String(200))
    platform: Mapped[str] = mapped_column(String(20))
    device_kind: Mapped[str] = mapped_column(String(200))
    jax_version: Mapped[str] = mapped_column(String(40))
    jaxlib_version: Mapped[str] = mapped_column(String(40))
    nr_devices: Mapped[int] = mapped_column(Integer)
    options_digest: Mapped[str] = mapped_column(String(64))
    options: Mapped[str] = mapped_column(Text)
    manifest_digest: Mapped[str] = mapped_column(ForeignKey("blobs.digest"))
    bundle_digest: Mapped[str] = mapped_column(ForeignKey("blobs.digest"))
    signer: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[float] = mapped_column(Float)


class CompiledFileRow(Base):
    """One file of a compiled set (``compiled_id``): its name in jax's cache directory, the
    blob of its bytes (``digest``) and its ``size`` in bytes."""

    __tablename__ = "compiled_files"
    __table_args__ = (Index("ix_compiled_files_digest", "digest"),)
    compiled_id: Mapped[int] = mapped_column(
        ForeignKey("compiled.id", ondelete="CASCADE"), primary_key=True
    )
    name: Mapped[str] = mapped_column(String(255), primary_key=True)
    digest: Mapped[str] = mapped_column(ForeignKey("blobs.digest"))
    size: Mapped[int] = mapped_column(BigInteger)
