"""The vocabulary of jaxport's OCI mapping (``schema/OCI.md``): media types, annotation keys,
limits, and the one reader of OCI manifests and indexes jaxport accepts.

Every manifest jaxport writes is canonical JSON (``canonical``: sorted keys, no spaces), so the
same version always maps to the same digests, and a second push or mirror finds everything
there already. Every manifest jaxport reads goes through ``parse_manifest`` or ``parse_index``,
which check, in this order: the size (``MAX_MANIFEST_BYTES``), JSON, ``schemaVersion`` 2, the
media type, each descriptor (media type, ``sha256:`` digest, size within its limit), the
count of descriptors; anything else is an ``OciError``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from jaxport import IntegrityError, OciError

__all__ = [
    "ANNOTATION",
    "ARCHIVE",
    "EMPTY_CONFIG",
    "EMPTY_JSON",
    "FINDINGS",
    "HEADER",
    "IMAGE_INDEX",
    "IMAGE_MANIFEST",
    "MAX_BLOB_BYTES",
    "MAX_CONFIG_BYTES",
    "MAX_DESCRIPTORS",
    "MAX_MANIFEST_BYTES",
    "MAX_REFERRER_BYTES",
    "SIGNATURE",
    "SKELETON",
    "TENSOR",
    "TITLE",
    "VARIANT",
    "VERSION",
    "Descriptor",
    "annotations_of",
    "canonical",
    "checked_manifest",
    "descriptor",
    "descriptors_json",
    "hex_of",
    "oci_digest",
    "parse_index",
    "parse_json",
    "parse_manifest",
    "sha256_of",
]

#: OCI image-spec v1.1 media types.
IMAGE_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
IMAGE_INDEX = "application/vnd.oci.image.index.v1+json"
EMPTY_JSON = "application/vnd.oci.empty.v1+json"
#: ``artifactType`` of a variant's manifest, and of a version's image index.
VARIANT = "application/vnd.jaxport.variant.v1"
VERSION = "application/vnd.jaxport.version.v1"
#: A variant manifest's config: the JSON description of the archive's header.
HEADER = "application/vnd.jaxport.header.v1+json"
#: Layers: a model archive's skeleton, one of its tensor sections, a function archive whole.
SKELETON = "application/vnd.jaxport.skeleton.v1"
TENSOR = "application/vnd.jaxport.tensor.v1"
ARCHIVE = "application/vnd.jaxport.archive.v1"
#: Referrers: a model-signing Sigstore bundle (cosign's media type for one), audit findings.
SIGNATURE = "application/vnd.dev.sigstore.bundle.v0.3+json"
FINDINGS = "application/vnd.jaxport.findings.v1+json"
#: ``org.opencontainers.image.title``: the file name ``oras pull`` gives a layer.
TITLE = "org.opencontainers.image.title"
#: jaxport's annotation keys (reverse-DNS of jaxport.dev), by what they hold.
ANNOTATION = {
    "name": "dev.jaxport.name",
    "version": "dev.jaxport.version",
    "kind": "dev.jaxport.kind",
    "metadata": "dev.jaxport.metadata",
    "platforms": "dev.jaxport.platforms",
    "nr_devices": "dev.jaxport.nr_devices",
    "sharded": "dev.jaxport.sharded",
    "archive": "dev.jaxport.archive.digest",
    "signer": "dev.jaxport.signature.signer",
    "signature_kind": "dev.jaxport.signature.kind",
    "created": "org.opencontainers.image.created",
}

#: The largest manifest or index read or written, in bytes (distribution's own limit).
MAX_MANIFEST_BYTES = 4 << 20
#: The largest variant config (the header's description), in bytes.
MAX_CONFIG_BYTES = 4 << 20
#: The largest signature bundle or findings layer, in bytes.
MAX_REFERRER_BYTES = 4 << 20
#: The most descriptors one manifest or index lists: a model's skeleton and its tensors
#: (``registry/_uploads.MAX_PARTS``); a 4 MiB manifest holds about 20,000 of them first.
MAX_DESCRIPTORS = (1 << 16) + 1
#: The largest blob a descriptor may declare, in bytes (a part of an archive: 1 TiB).
MAX_BLOB_BYTES = 1 << 40

#: The empty config of a referrer manifest (image-spec v1.1 "guidance for an empty
#: descriptor"): the two bytes ``{}``.
EMPTY_CONFIG = b"{}"

_OCI_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")


@dataclasses.dataclass(frozen=True)
class Descriptor:
    """An OCI content descriptor: ``media_type``, ``digest`` (``sha256:`` + hex), ``size`` in
    bytes, and optional ``artifact_type`` and ``annotations``."""

    media_type: str
    digest: str
    size: int
    annotations: Mapping[str, str] = dataclasses.field(default_factory=dict)
    artifact_type: str | None = None

    @classmethod
    def of(
        cls,
        media_type: str,
        data: bytes,
        annotations: Mapping[str, str] | None = None,
        artifact_type: str | None = None,
    ) -> Descriptor:
        """The descriptor of ``data``."""
        return cls(media_type, sha256_of(data), len(data), dict(annotations or {}), artifact_type)

    def to_json(self) -> dict[str, Any]:
        """The descriptor as OCI JSON (keys left out where empty)."""
        out: dict[str, Any] = {"mediaType": self.media_type, "digest": self.digest,
                               "size": self.size}  # fmt: skip
        if self.artifact_type:
            out["artifactType"] = self.artifact_type
        if self.annotations:
            out["annotations"] = dict(self.annotations)
        return out

    @property
    def hex(self) -> str:
        """The digest's 64 hex digits (a jaxport blob digest)."""
        return self.digest.removeprefix("sha256:")


def canonical(value: Any) -> bytes:
    """``value`` as canonical JSON: sorted keys, no spaces, UTF-8 (one version, one digest)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def sha256_of(data: bytes | memoryview) -> str:
    """The OCI digest of ``data``."""
    return "sha256:" + hashlib.sha256(data).hexdigest()


def checked_manifest(body: bytes, digest: str) -> bytes:
    """``body``, read as the manifest ``digest``, once it is within the manifest limit and has
    that digest.

    Raises:
        OciError: over ``MAX_MANIFEST_BYTES``. IntegrityError: not ``digest``'s bytes.
    """
    if len(body) > MAX_MANIFEST_BYTES:
        raise OciError(f"manifest {digest} is over {MAX_MANIFEST_BYTES} bytes")
    found = sha256_of(body)
    if found != digest:
        raise IntegrityError(
            f"manifest {digest} reads as {found}", expected=hex_of(digest), found=hex_of(found)
        )
    return body


def oci_digest(hex_digest: str) -> str:
    """A jaxport digest (64 hex) as an OCI one."""
    return "sha256:" + hex_digest


def hex_of(digest: str) -> str:
    """The hex of an OCI digest.

    Raises:
        OciError: not ``sha256:`` and 64 lower-case hex digits.
    """
    if not isinstance(digest, str) or not _OCI_DIGEST.fullmatch(digest):
        raise OciError(f"not an OCI sha256 digest: {digest!r:.90}")
    return digest[7:]


def parse_json(body: bytes, what: str, limit: int) -> dict[str, Any]:
    """``body`` as a JSON object of at most ``limit`` bytes.

    Raises:
        OciError: larger, not UTF-8 JSON, or not an object.
    """
    if len(body) > limit:
        raise OciError(f"{what} is {len(body)} bytes, over the limit of {limit}")
    try:
        value = json.loads(body)
    except (ValueError, RecursionError):
        raise OciError(f"{what} is not valid JSON") from None
    if not isinstance(value, dict):
        raise OciError(f"{what} is not a JSON object")
    return value


def parse_manifest(body: bytes, what: str) -> dict[str, Any]:
    """An image manifest, checked (see the module docstring); ``config`` becomes a
    ``Descriptor``, ``layers`` a list of them, ``subject`` one or None.

    Raises:
        OciError: see the module docstring.
    """
    doc = _document(body, what, IMAGE_MANIFEST)
    layers = doc.get("layers")
    if not isinstance(layers, list) or len(layers) > MAX_DESCRIPTORS:
        raise OciError(f"{what}: layers must be a list of at most {MAX_DESCRIPTORS}")
    return {
        "artifactType": _optional_str(doc, "artifactType", what),
        "config": descriptor(doc.get("config"), f"{what}'s config"),
        "layers": [descriptor(d, f"{what}'s layer {i}") for i, d in enumerate(layers)],
        "subject": None if doc.get("subject") is None else descriptor(doc["subject"], what),
        "annotations": annotations_of(doc.get("annotations"), what),
    }


def parse_index(body: bytes, what: str) -> dict[str, Any]:
    """An image index, checked (see the module docstring); ``manifests`` a list of
    ``Descriptor``s.

    Raises:
        OciError: see the module docstring.
    """
    doc = _document(body, what, IMAGE_INDEX)
    manifests = doc.get("manifests")
    if not isinstance(manifests, list) or len(manifests) > MAX_DESCRIPTORS:
        raise OciError(f"{what}: manifests must be a list of at most {MAX_DESCRIPTORS}")
    return {
        "artifactType": _optional_str(doc, "artifactType", what),
        "manifests": [descriptor(d, f"{what}'s entry {i}") for i, d in enumerate(manifests)],
        "annotations": annotations_of(doc.get("annotations"), what),
    }


def descriptor(value: Any, what: str) -> Descriptor:
    """A descriptor from its JSON, checked.

    Raises:
        OciError: not an object with a string ``mediaType``, a sha256 ``digest`` and a
            ``size`` from 0 to ``MAX_BLOB_BYTES``; bad annotations.
    """
    if not isinstance(value, dict):
        raise OciError(f"{what} is not a descriptor")
    media_type, digest, size = value.get("mediaType"), value.get("digest"), value.get("size")
    if not isinstance(media_type, str) or not 0 < len(media_type) <= 255:
        raise OciError(f"{what}: mediaType must be a string")
    if not isinstance(digest, str):
        raise OciError(f"{what}: digest must be a string")
    hex_of(digest)
    if isinstance(size, bool) or not isinstance(size, int) or not 0 <= size <= MAX_BLOB_BYTES:
        raise OciError(f"{what}: size must be an integer from 0 to {MAX_BLOB_BYTES}")
    return Descriptor(
        media_type, digest, size, annotations_of(value.get("annotations"), what),
        _optional_str(value, "artifactType", what),
    )  # fmt: skip


def annotations_of(value: Any, what: str) -> dict[str, str]:
    """OCI annotations: a string -> string map (none: empty).

    Raises:
        OciError: anything else.
    """
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise OciError(f"{what}: annotations must map strings to strings")
    return dict(value)


def descriptors_json(items: Sequence[Descriptor]) -> list[dict[str, Any]]:
    """Each descriptor as OCI JSON."""
    return [d.to_json() for d in items]


def _document(body: bytes, what: str, media_type: str) -> dict[str, Any]:
    doc = parse_json(body, what, MAX_MANIFEST_BYTES)
    if doc.get("schemaVersion") != 2:
        raise OciError(f"{what}: schemaVersion must be 2")
    if doc.get("mediaType", media_type) != media_type:
        raise OciError(f"{what}: mediaType {str(doc.get('mediaType'))!r:.80}, not {media_type}")
    return doc


def _optional_str(doc: Mapping[str, Any], key: str, what: str) -> str | None:
    value = doc.get(key)
    if value is not None and not isinstance(value, str):
        raise OciError(f"{what}: {key} must be a string")
    return value
