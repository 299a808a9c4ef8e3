"""One variant as OCI content: its config (the archive header's description, media type
``HEADER``) and its manifest (layers: the archive's parts as the registry stores them), built
from a registry's variant and read back, checked, from a target (``schema/OCI.md``).

A config is descriptive (what ``jaxport.inspect`` shows, for a reader that has no jaxport) and
says where each part lies in the archive (``parts``: digest, offset, size): the manifest's
layers must be those parts, in order; the registry that takes the archive validates it in full
again (``Registry.push``).
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from jaxport import IntegrityError, JaxportError, OciError
from jaxport.export._internal import Part
from jaxport.registry._oci_media import (
    ANNOTATION,
    ARCHIVE,
    HEADER,
    IMAGE_MANIFEST,
    MAX_CONFIG_BYTES,
    SKELETON,
    TENSOR,
    TITLE,
    VARIANT,
    Descriptor,
    canonical,
    checked_manifest,
    hex_of,
    oci_digest,
    parse_json,
    parse_manifest,
)
from jaxport.registry._oci_target import OciTarget

if TYPE_CHECKING:
    from jaxport.registry._types import Ref, VariantInfo

__all__ = [
    "OciVariant",
    "config_of",
    "fetch_manifest_checked",
    "fetch_small",
    "read_variant",
    "variant_manifest",
]

#: The config's format version (``jaxport_header``).
CONFIG_VERSION = 1


@dataclasses.dataclass(frozen=True)
class OciVariant:
    """A variant read from OCI content: its ``manifest``'s descriptor, its archive's sha256
    ``digest`` (hex) and ``size`` in bytes, ``kind``, ``platforms``, ``nr_devices``,
    ``sharded``, its ``parts`` and the whole ``config``."""

    manifest: Descriptor
    digest: str
    size: int
    kind: str
    platforms: tuple[str, ...]
    nr_devices: int
    sharded: bool
    parts: tuple[Part, ...]
    config: dict[str, Any]


def config_of(variant: VariantInfo, parts: Sequence[Part]) -> dict[str, Any]:
    """The config of ``variant`` whose archive is ``parts``."""
    return {
        "jaxport_header": CONFIG_VERSION,
        "kind": variant.kind,
        "fun_name": variant.fun_name,
        "platforms": list(variant.platforms),
        "nr_devices": variant.nr_devices,
        "sharded": variant.sharded,
        "calling_convention_version": variant.calling_convention_version,
        "format_version": variant.format_version,
        "jax_version": variant.jax_version,
        "jaxlib_version": variant.jaxlib_version,
        "vjp_order": variant.vjp_order,
        "shape_polymorphic": variant.shape_polymorphic,
        "custom_call_targets": list(variant.custom_call_targets),
        "in_signature": variant.in_signature,
        "out_signature": variant.out_signature,
        "metadata": dict(variant.metadata),
        "methods": [_plain(dataclasses.asdict(m)) for m in variant.methods],
        "tensors": [
            {"path": t.path, "shape": list(t.shape), "dtype": t.dtype} for t in variant.tensors
        ],
        "archive": {"digest": oci_digest(variant.digest), "size": variant.size_bytes},
        "parts": [
            {"digest": oci_digest(p.digest), "offset": p.offset, "size": p.size} for p in parts
        ],
    }


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return str(value)


def variant_manifest(
    ref: Ref, variant: VariantInfo, parts: Sequence[Part], config: Descriptor
) -> bytes:
    """The variant's image manifest (canonical JSON)."""
    layers = []
    for p in parts:
        if variant.kind != "model":
            kind, title = ARCHIVE, f"{ref.name}.jaxport"
        elif p.position == 0:
            kind, title = SKELETON, "skeleton"
        else:
            kind, title = TENSOR, f"tensor-{p.position - 1:05d}"
        layers.append(Descriptor(kind, oci_digest(p.digest), p.size, {TITLE: title}).to_json())
    notes = {
        ANNOTATION["name"]: ref.name,
        ANNOTATION["version"]: str(ref.version),
        ANNOTATION["kind"]: variant.kind,
        ANNOTATION["platforms"]: ",".join(variant.platforms),
        ANNOTATION["nr_devices"]: str(variant.nr_devices),
        ANNOTATION["sharded"]: "true" if variant.sharded else "false",
        ANNOTATION["archive"]: oci_digest(variant.digest),
    }
    return canonical({
        "schemaVersion": 2, "mediaType": IMAGE_MANIFEST, "artifactType": VARIANT,
        "config": config.to_json(), "layers": layers, "annotations": notes,
    })  # fmt: skip


def read_variant(target: OciTarget, descriptor: Descriptor) -> OciVariant:
    """The variant whose manifest ``descriptor`` names, its manifest and config fetched and
    checked: the manifest's digest and size, its ``artifactType``, the config's media type,
    size and digest, the config's fields, its ``parts`` against the layers (same digests and
    sizes, in order; a skeleton then tensors, or one archive) and against each other
    (``ArchiveParts.check``).

    Raises:
        OciError: anything malformed or over its limit.
        IntegrityError: the manifest or config does not have its digest.
    """
    if descriptor.media_type != IMAGE_MANIFEST:
        raise OciError(f"a version's index lists a {descriptor.media_type:.80}, not a manifest")
    doc = fetch_manifest_checked(target, descriptor.digest)
    if doc["artifactType"] != VARIANT or doc["config"].media_type != HEADER:
        raise OciError(f"manifest {descriptor.digest} is not a jaxport variant's")
    config = parse_json(fetch_small(target, doc["config"], MAX_CONFIG_BYTES), "a config",
                        MAX_CONFIG_BYTES)  # fmt: skip
    try:
        return _variant(descriptor, doc, config)
    except (KeyError, TypeError, ValueError) as e:
        if isinstance(e, JaxportError):
            raise
        raise OciError(f"the config of {descriptor.digest} is malformed ({e!r:.80})") from None


def _variant(descriptor: Descriptor, doc: dict[str, Any], config: dict[str, Any]) -> OciVariant:
    from jaxport.registry._uploads import ArchiveParts

    if config.get("jaxport_header") != CONFIG_VERSION:
        raise OciError(f"{descriptor.digest}: a config of another version than {CONFIG_VERSION}")
    kind = config["kind"]
    if kind not in ("function", "model"):
        raise OciError(f"{descriptor.digest}: kind {kind!r:.40}")
    archive = config["archive"]
    digest, size = hex_of(archive["digest"]), _count(archive["size"])
    parts = tuple(
        Part(i, hex_of(p["digest"]), _count(p["offset"]), _count(p["size"]))
        for i, p in enumerate(config["parts"])
    )
    _check_layers(descriptor.digest, kind, doc["layers"], parts)
    try:
        ArchiveParts(digest, size, parts).check()
    except JaxportError as e:
        raise OciError(f"{descriptor.digest}: {e}") from None
    platforms = tuple(str(p) for p in config["platforms"])
    return OciVariant(
        descriptor, digest, size, kind, platforms, _count(config["nr_devices"]),
        bool(config["sharded"]), parts, config,
    )  # fmt: skip


def _check_layers(where: str, kind: str, layers: list[Descriptor], parts: Sequence[Part]) -> None:
    if len(layers) != len(parts) or not parts:
        raise OciError(f"{where}: {len(layers)} layers for {len(parts)} parts")
    if kind == "function" and len(parts) != 1:
        raise OciError(f"{where}: a function archive is one layer")
    for i, (layer, part) in enumerate(zip(layers, parts, strict=True)):
        wanted = ARCHIVE if kind == "function" else SKELETON if i == 0 else TENSOR
        if layer.media_type != wanted or layer.hex != part.digest or layer.size != part.size:
            raise OciError(f"{where}: layer {i} is not the config's part {i}")


def _count(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise OciError(f"a count or size that is not an integer >= 0: {value!r:.40}")
    return value


def fetch_manifest_checked(target: OciTarget, digest: str) -> dict[str, Any]:
    """The image manifest ``digest``, its bytes verified, parsed (``parse_manifest``).

    Raises:
        NotFoundError: absent. OciError: malformed. IntegrityError: not its digest.
    """
    hex_of(digest)
    _, body = target.fetch_manifest(digest)
    return parse_manifest(checked_manifest(body, digest), digest)


def fetch_small(target: OciTarget, descriptor: Descriptor, limit: int) -> bytes:
    """A small blob (a config, a signature, findings) whole, verified.

    Raises:
        OciError: its size is over ``limit``.
        NotFoundError, IntegrityError: as ``OciTarget.fetch_blob``; also checked here.
    """
    if descriptor.size > limit:
        raise OciError(f"blob {descriptor.digest} of {descriptor.size} bytes, over {limit}")
    data = b"".join(target.fetch_blob(descriptor.digest, descriptor.size))
    found = hashlib.sha256(data).hexdigest()
    if len(data) != descriptor.size or found != descriptor.hex:
        raise IntegrityError(
            f"blob {descriptor.digest} reads as sha256:{found} of {len(data)} bytes",
            expected=descriptor.hex, found=found,
        )  # fmt: skip
    return data
