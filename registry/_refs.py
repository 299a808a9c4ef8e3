"""What the registry hands back: variants, references, resolutions; and name rules."""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any

from jaxport._errors import InvalidNameError

__all__ = [
    "MAX_NAME_LENGTH",
    "Ref",
    "Rejection",
    "Resolution",
    "VariantInfo",
    "check_name",
    "parse_reference",
]

#: The longest name or alias, in characters.
MAX_NAME_LENGTH = 200
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._\-]*")


def check_name(name: str, what: str = "name") -> str:
    """``name`` if it is a valid registry name or alias.

    Rules: 1 to 200 characters of letters, digits, ``.``, ``_`` and ``-``, starting with a letter
    or digit (so no path separators, control characters, ``@`` or ``:``).

    Raises:
        InvalidNameError: the name breaks a rule; the message says which.
    """
    if not isinstance(name, str) or not name:
        raise InvalidNameError(f"{what} must be a non-empty string, got {name!r}")
    if len(name) > MAX_NAME_LENGTH:
        raise InvalidNameError(f"{what} is {len(name)} characters, the limit is {MAX_NAME_LENGTH}")
    if not _NAME.fullmatch(name):
        raise InvalidNameError(
            f"{what} {name!r} is not allowed: use letters, digits, '.', '_' and '-', "
            "starting with a letter or digit"
        )
    return name


def parse_reference(reference: str) -> tuple[str, int | None, str | None]:
    """``"mlp"``, ``"mlp:3"`` or ``"mlp@prod"`` -> ``(name, version, alias)``.

    Raises:
        InvalidNameError: a malformed reference.
    """
    if not isinstance(reference, str):
        raise InvalidNameError(f"a reference must be a string, got {reference!r}")
    if "@" in reference:
        name, _, alias = reference.partition("@")
        return check_name(name), None, check_name(alias, "alias")
    if ":" in reference:
        name, _, version = reference.partition(":")
        if not version.isdigit() or int(version) < 1:
            raise InvalidNameError(
                f"bad version in reference {reference!r}: expected NAME:N, N >= 1"
            )
        return check_name(name), int(version), None
    return check_name(reference), None, None


@dataclasses.dataclass(frozen=True)
class VariantInfo:
    """One variant (one archive) of a version, as indexed; sizes in bytes, times in unix seconds."""

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

    @classmethod
    def from_row(cls, name: str, version: int, row: Any) -> VariantInfo:
        """From a ``variants`` row."""
        return cls(
            name=name,
            version=version,
            digest=row.digest,
            fun_name=row.fun_name,
            platforms=tuple(row.platforms.split(",")) if row.platforms else (),
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
        )

    def runs_on(self, platform: str | None, nr_devices: int | None) -> str | None:
        """Why this variant cannot run on ``platform`` with ``nr_devices``, or None if it can.

        The device rule is jax's call-time check (``Exported.call``): an export for N devices
        runs on exactly N; one for 1 device with no shardings runs on any count.
        """
        if platform is not None and platform not in self.platforms:
            return f"exported for {', '.join(self.platforms)}, not {platform}"
        if (
            nr_devices is not None
            and self.nr_devices != nr_devices
            and (self.nr_devices != 1 or self.sharded)
        ):
            return f"exported for {self.nr_devices} devices, not {nr_devices}"
        return None


@dataclasses.dataclass(frozen=True)
class Ref:
    """A version of a name, as ``push`` made it or found it."""

    name: str
    version: int
    variants: tuple[VariantInfo, ...]

    @property
    def digests(self) -> tuple[str, ...]:
        """The sha256 digest (hex) of each variant's archive."""
        return tuple(v.digest for v in self.variants)

    def __str__(self) -> str:
        return f"{self.name}:{self.version}"


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
