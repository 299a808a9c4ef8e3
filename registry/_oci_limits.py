"""The limits of jaxport's OCI distribution client (``registry/_oci_client.py``), in one place.

Sizes in bytes. A registry's answer over a limit is an ``OciError`` and stores nothing.
"""

from __future__ import annotations

__all__ = [
    "ATTEMPTS",
    "CHUNK_SIZE",
    "ERROR_TEXT",
    "MANIFEST_LIMIT",
    "MAX_TAGS",
    "MEDIA_TYPES",
    "MIN_RATE",
    "MONOLITHIC_LIMIT",
    "READ_CHUNK",
    "REDIRECTS",
    "TAG_PAGES",
]

#: The largest manifest or image index read or written: 4 MiB, the size the distribution spec
#: says registries SHOULD accept at least ("Pushing manifests") and containerd reads at most.
MANIFEST_LIMIT = 4 << 20
#: A blob up to this size goes up in one ``PUT`` (POST, then PUT with the bytes); a larger one
#: in ``PATCH`` chunks of ``CHUNK_SIZE`` (held in memory one at a time), then an empty ``PUT``.
MONOLITHIC_LIMIT = 32 << 20
CHUNK_SIZE = 32 << 20
#: The size of the pieces a blob is read in.
READ_CHUNK = 1 << 20
#: The slowest a blob may come, in bytes a second over each window of the client's timeout
#: (``registry/_oci_pace.py``): 1 KiB/s, far below any working link.
MIN_RATE = 1 << 10
#: Redirects followed for one request.
REDIRECTS = 5
#: Pages of a tag list (``Link: <...>; rel="next"``) read at most.
TAG_PAGES = 10_000
#: Tags of one repository read at most, all pages together (a page may hold 4 MiB of them).
MAX_TAGS = 1_000_000
#: Characters of a registry's own error text repeated in a message.
ERROR_TEXT = 200
#: Tries of a read (GET, HEAD) that met a connection error or a 502, 503 or 504.
ATTEMPTS = 3
#: The manifest media types read and written: OCI image manifest and index, and Docker's v2
#: manifest and manifest list (read only, as other tools push them).
MEDIA_TYPES = (
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
)
