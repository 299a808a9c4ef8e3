"""Where OCI content goes: one repository of an OCI registry, or an OCI image layout (a bundle).

``OciTarget`` is the contract between jaxport's mapping of a version to OCI content
(``registry/_oci_mapping.py``: manifests, an image index, referrers) and the two places that
content is written to or read from:

- an OCI image layout (``registry/_oci_layout.py``): a directory or a tar file with
  ``oci-layout``, ``index.json`` and ``blobs/sha256/...`` (OCI image-spec v1.1, "image layout"),
  used by ``jaxport bundle``;
- a repository of a registry speaking the OCI distribution spec v1.1 (``registry/_oci_client.py``:
  ``docker-registry``, Harbor, zot, GHCR, ...), used by ``jaxport oci push`` / ``oci pull``.

Digests are OCI digests, ``"sha256:" + 64 lower-case hex``. Every method raises typed
``jaxport`` errors only: a digest that does not match what was read is an ``IntegrityError``,
something absent a ``NotFoundError``, an answer over its limit or malformed an ``OciError``
(``jaxport._errors``), never a raw httpx / tarfile / json error.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, Protocol

__all__ = ["OciTarget"]


class OciTarget(Protocol):
    """One OCI repository, or an image layout: blobs, manifests and tags read and written."""

    def has_blob(self, digest: str) -> bool:
        """Whether the blob ``digest`` is there already (a push sends only the absent ones)."""
        ...

    def push_blob(self, digest: str, size: int, chunks: Iterable[bytes]) -> None:
        """Store a blob of ``size`` bytes; the target (or the registry) checks its digest.

        Raises:
            IntegrityError: the bytes sent do not have ``digest`` or ``size``.
        """
        ...

    def fetch_blob(self, digest: str, size: int) -> Iterator[bytes]:
        """The blob's bytes in chunks, at most ``size``; the digest is checked at the last chunk.

        Raises:
            NotFoundError: no such blob.
            IntegrityError: more or fewer bytes than ``size``, or not ``digest``'s.
        """
        ...

    def push_manifest(self, reference: str | None, media_type: str, body: bytes) -> str:
        """Store a manifest or image index, tagged ``reference`` (a tag) or untagged (``None``).

        Returns:
            the manifest's digest (``sha256:`` of ``body``).
        """
        ...

    def fetch_manifest(self, reference: str) -> tuple[str, bytes]:
        """A manifest or index by tag or digest: its media type and bytes (a digest is checked).

        Raises:
            NotFoundError: no such tag or manifest.
            OciError: the answer is larger than the manifest limit, or not a manifest.
            IntegrityError: fetched by digest, the bytes do not have it.
        """
        ...

    def referrers(self, digest: str, artifact_type: str | None = None) -> list[dict[str, Any]]:
        """The descriptors of the manifests whose ``subject`` is ``digest`` (OCI 1.1 referrers;
        where the registry lacks the API, the fallback tag ``sha256-<hex>``'s index)."""
        ...

    def tags(self) -> list[str]:
        """The repository's tags."""
        ...
