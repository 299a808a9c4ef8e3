"""What the registry hands back: variants, versions, resolutions, push, gc and verify reports.

Sizes are in bytes, times in unix seconds (float).
"""

from __future__ import annotations

import dataclasses
import json
from typing import TYPE_CHECKING, Any

from jaxport.registry._names import DIGEST_PREFIX
from jaxport.registry._rules import device_reason, platform_reason

if TYPE_CHECKING:
    from jaxport.export import MethodInfo, TensorInfo

__all__ = [
    "AliasMove",
    "BlobProblem",
    "GcReport",
    "PushResult",
    "Ref",
    "Rejection",
    "Resolution",
    "VariantInfo",
    "VerifyReport",
    "nothing_matches",
]

#: Hex digits in a short digest (``VariantInfo.short_digest``).
SHORT_DIGEST_HEX = 12
#: The fields of one finding as it travels between registries (an ``audits`` row, less its
#: id): a findings layer of an OCI referrer (``registry/_oci_referrers.py``) and a finding
#: adopted by a registry (``registry/_adoption.py``).
FINDING_FIELDS = ("digest", "level", "jax_version", "jaxlib_version", "platform", "devices",
                  "examples_digest", "status", "reason", "details_json", "seconds",
                  "created_at")  # fmt: skip


@dataclasses.dataclass(frozen=True)
class VariantInfo:
    """One variant (one archive) of a version, as indexed.

    ``metadata`` is the archive's own (written into it by its producer); ``jax_version`` is the
    producer's jax, or ``"unknown"`` for jax-native bytes that do not record it.

    ``kind`` is ``"function"`` (an Exported: ``Registry.pull``) or ``"model"`` (a
    ``jaxport.Model``: ``Registry.pull_model``). A model variant's ``fun_name`` and signatures
    are empty, its ``platforms`` are those every method runs on, ``nr_devices`` the most any
    method needs, ``calling_convention_version`` the oldest and ``vjp_order`` the lowest any
    method has (as ``jaxport.inspect``); ``Registry.get`` fills in ``methods`` (each method's
    signature) and ``tensors`` (path, shape, dtype, size in bytes, sha256 of each parameter),
    read from the archive's header; other queries leave them empty.
    """

    name: str
    version: int
    digest: str
    fun_name: str
    platforms: tuple[str, ...]
    nr_devices: int
    sharded: bool
    calling_convention_version: int
    format_version: int
    jax_version: str
    jaxlib_version: str
    vjp_order: int
    shape_polymorphic: bool
    custom_call_targets: tuple[str, ...]
    size_bytes: int
    in_signature: str
    out_signature: str
    created_at: float
    metadata: dict[str, str]
    variant_id: int = 0
    kind: str = "function"
    methods: tuple[MethodInfo, ...] = ()
    tensors: tuple[TensorInfo, ...] = ()
    #: The newest StableHLO version among its modules (None: pushed before it was recorded).
    stablehlo_version: str | None = None

    @classmethod
    def from_row(cls, name: str, version: int, row: Any) -> VariantInfo:
        """From a ``variants`` row."""
        return cls(
            name=name,
            version=version,
            digest=row.digest,
            fun_name=row.fun_name,
            platforms=_platforms(row.platforms),
            nr_devices=row.nr_devices,
            sharded=bool(row.sharded),
            calling_convention_version=row.calling_convention_version,
            format_version=row.format_version,
            jax_version=row.jax_version,
            jaxlib_version=row.jaxlib_version,
            vjp_order=row.vjp_order,
            shape_polymorphic=bool(row.shape_polymorphic),
            custom_call_targets=tuple(json.loads(row.custom_call_targets)),
            size_bytes=row.size_bytes,
            in_signature=row.in_signature,
            out_signature=row.out_signature,
            created_at=row.created_at,
            metadata=json.loads(row.metadata_json),
            variant_id=row.id,
            kind=row.kind,
            stablehlo_version=getattr(row, "stablehlo_version", None),
        )

    @staticmethod
    def row_runs_on(row: Any, platform: str | None, nr_devices: int | None) -> str | None:
        """``runs_on`` of a ``variants`` row, without making its ``VariantInfo``."""
        return platform_reason(_platforms(row.platforms), platform) or device_reason(
            row.nr_devices, bool(row.sharded), nr_devices
        )

    @property
    def short_digest(self) -> str:
        """``sha256:`` and the digest's first 12 hex digits: a reference every command takes."""
        return f"{DIGEST_PREFIX}{self.digest[:SHORT_DIGEST_HEX]}"

    def runs_on(self, platform: str | None, nr_devices: int | None) -> str | None:
        """Why this variant cannot run on ``platform`` with ``nr_devices``, or None if it can
        (``_rules``: jax's call-time device check)."""
        return platform_reason(self.platforms, platform) or device_reason(
            self.nr_devices, self.sharded, nr_devices
        )


def _platforms(text: str) -> tuple[str, ...]:
    """The platforms of a ``variants.platforms`` column (comma-separated)."""
    return tuple(text.split(",")) if text else ()


@dataclasses.dataclass(frozen=True)
class Ref:
    """A version of a name: its variants, push-time ``metadata`` and creation time.

    ``kind`` is its variants' (a version's variants are all functions or all models):
    ``"function"`` or ``"model"``; it is not passed, but taken from ``variants``.
    """

    name: str
    version: int
    variants: tuple[VariantInfo, ...]
    metadata: dict[str, str] = dataclasses.field(default_factory=dict)
    created_at: float = 0.0
    kind: str = dataclasses.field(init=False)

    def __post_init__(self) -> None:
        kind = self.variants[0].kind if self.variants else "function"
        object.__setattr__(self, "kind", kind)

    @property
    def digests(self) -> tuple[str, ...]:
        """The sha256 digest (hex) of each variant's archive."""
        return tuple(v.digest for v in self.variants)

    def __str__(self) -> str:
        return f"{self.name}:{self.version}"


@dataclasses.dataclass(frozen=True)
class PushResult(Ref):
    """What ``push`` did: the version, and

    Attributes:
        created: False when the same archives (and examples) were already that version;
            its metadata is then kept as it was (a note says so when they differ).
        notes: what the push could not keep, e.g. what jax's native format lost.
        repaired: digests whose missing or corrupt blob this push wrote again.
    """

    created: bool = True
    notes: tuple[str, ...] = ()
    repaired: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class Rejection:
    """A variant ``resolve`` did not choose, and why."""

    variant: VariantInfo
    reason: str


@dataclasses.dataclass(frozen=True)
class Resolution:
    """What ``resolve`` chose (None: nothing matched) and why it rejected the others."""

    name: str
    platform: str | None
    nr_devices: int | None
    chosen: VariantInfo | None
    rejected: tuple[Rejection, ...]


def nothing_matches(r: Resolution) -> str:
    """The NotFoundError message when ``resolve`` chose nothing: what exists instead."""
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


@dataclasses.dataclass(frozen=True)
class AliasMove:
    """One move of an alias; ``to_version`` None: removed; ``moved_at`` in unix seconds."""

    alias: str
    from_version: int | None
    to_version: int | None
    moved_at: float


@dataclasses.dataclass(frozen=True)
class GcReport:
    """What ``gc`` removed (or, on a dry run, would remove).

    Attributes:
        digests: unreferenced blobs removed.
        bytes: their total size in bytes.
        dry_run: nothing was removed.
        kept_young: unreferenced blobs kept back because they are younger than ``min_age``.
        kept_pending: unreferenced blobs kept back because a push in flight holds them.
        temp_files: stale temporary files (of killed writes) removed, and the directories
            of killed commits (``registry/_workdirs.py``: absolute paths).
        foreign: files in the blob store that are not jaxport's, left alone.
        kept_temp: temporary files of a push in flight (whatever their age), or younger than
            ``temp_age`` (a killed write not yet stale), left alone.
        purged: the versions (``name:version``) a retention run deleted whose restore period
            was over, removed for good (``Registry.retain``; on a dry run: that would be).
    """

    digests: tuple[str, ...]
    bytes: int
    dry_run: bool
    kept_young: tuple[str, ...] = ()
    kept_pending: tuple[str, ...] = ()
    temp_files: tuple[str, ...] = ()
    foreign: tuple[str, ...] = ()
    kept_temp: tuple[str, ...] = ()
    purged: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class BlobProblem:
    """A blob the database needs that is ``missing``, ``corrupt`` (its bytes do not hash to
    its digest) or ``invalid`` (intact, but ``verify(deep=True)`` could not read it as an
    archive: ``reason`` says why), or ``newer`` (valid, but written by a newer jax than this
    one: ``reason`` says which), and who needs it (``"name:version"``, or
    ``"name:version examples"`` for golden examples)."""

    digest: str
    state: str
    used_by: tuple[str, ...]
    reason: str = ""


@dataclasses.dataclass(frozen=True)
class VerifyReport:
    """What ``verify`` found: every digest the database refers to, checked against the store.

    Attributes:
        checked: digests read and hashed.
        missing: digests the database refers to that the store lacks.
        corrupt: digests whose stored bytes do not hash to them.
        unreferenced: digests in the store that nothing refers to (``gc`` removes them).
        problems: each missing, corrupt or invalid blob with the versions that need it.
        invalid: archives that hash right but do not read (``deep`` only), e.g. a header
            whose custom-call targets disagree with its modules.
        deep: whether every archive was also read in full, in a worker process.
        newer: archives that are valid but newer than this jax (``deep`` only): written by a
            newer jax in modules this one cannot parse (listed in ``problems`` as ``newer``,
            not counted against ``ok``).
    """

    checked: int
    missing: tuple[str, ...]
    corrupt: tuple[str, ...]
    unreferenced: tuple[str, ...]
    problems: tuple[BlobProblem, ...] = ()
    invalid: tuple[str, ...] = ()
    deep: bool = False
    newer: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        """No blob missing, corrupt or invalid (unreferenced ones are harmless)."""
        return not self.missing and not self.corrupt and not self.invalid
