"""A function archive on a registry server read a module at a time (``HttpBackend.function``):
the archive's preamble and header by two HTTP ranges (the header checked against the digest in
the preamble), the primal module now and each VJP module the first time ``.vjp()`` asks, from
``GET /blobs/{digest}/modules/{index}`` (``server/_api_modules.py``).

The server reads the module with jaxport's own reader (the section's sha256 checked before any
byte of it is used) and sends its sha256 in ``X-Jaxport-Module-Sha256``; here each module is
checked against its length in the header and that sha256, then vetted (custom calls, the
sandbox, ``main``'s signature) as a local ``jaxport.loads`` vets it
(``jaxport.export._internal.exported_from_header``). A server without the route (older than
it: a 404 or 405 that is no jaxport error) gives ``None``: the caller reads the archive whole.
So does a primal module over half the archive's size (``WHOLE_ABOVE``): the modules of one
archive are compressed together, constants they share stored once, so a primal that holds
most of the archive's bytes is cheaper in the archive, and its VJPs then cost nothing more.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING
from urllib.parse import quote

import httpx

from jaxport import IntegrityError, RegistryError, ServerUnavailableError
from jaxport.registry._remote_reads import RemoteArchive

if TYPE_CHECKING:
    from jax.export import Exported

    from jaxport.registry._http import Http
    from jaxport.registry._types import VariantInfo

__all__ = ["MODULE_SHA256", "WHOLE_ABOVE", "RemoteModules", "lazy_function"]

#: A primal module longer than this fraction of the archive (its constants shared with the
#: VJPs', which the archive stores once; or compressible ones, stored compressed) is not
#: fetched alone: the archive is read whole (compressed, every module), the VJPs decompressed
#: here when ``.vjp()`` asks.
WHOLE_ABOVE = 0.5
#: The answer's header with the sha256 (hex) of the module's bytes (``server/_api_modules.py``).
MODULE_SHA256 = "X-Jaxport-Module-Sha256"


class RemoteModules:
    """The modules of the function archive ``archive`` (a ``RemoteArchive``), fetched by index.

    Attributes:
        bytes_fetched: module bytes received so far (the archive's own ``bytes_fetched``
            counts its prefix).
    """

    def __init__(self, http: Http, archive: RemoteArchive) -> None:
        self._http, self.archive = http, archive
        self.bytes_fetched = 0
        self._lock = threading.Lock()

    def fetch(self, index: int, length: int) -> tuple[bytes, str]:
        """Module ``index``'s bytes (at most ``length``: the header's) and the sha256 the
        server says they have.

        Raises:
            IntegrityError: the server sent more than ``length`` bytes, or no sha256.
            RegistryError: a server without the route (the exact class, no subclass).
            NotFoundError, PermissionDeniedError, ServerUnavailableError, CorruptArchiveError:
                the server's error, typed (``IntegrityError`` for a corrupt archive).
        """
        digest = self.archive.digest
        path = f"/blobs/{quote(digest, safe='')}/modules/{int(index)}"
        buffer = bytearray()
        with self._http.stream(path) as response:
            said = response.headers.get(MODULE_SHA256)
            try:
                for chunk in response.iter_raw():
                    if len(buffer) + len(chunk) > length:
                        raise IntegrityError(
                            f"blob {digest}: module {index} is longer than the {length:,} bytes "
                            "its header says",
                            expected=digest,
                        )
                    buffer += chunk
            except httpx.TimeoutException:
                raise ServerUnavailableError(
                    f"blob {digest}: module {index} stalled for {self._http.timeout:g} s"
                ) from None
            except httpx.HTTPError:
                pass  # a short answer: its length is checked by the caller
        with self._lock:
            self.bytes_fetched += len(buffer)
        if not isinstance(said, str) or len(said) != 64:
            raise IntegrityError(
                f"blob {digest}: module {index} came without its {MODULE_SHA256}",
                expected=digest,
            )
        return bytes(buffer), said.lower()


def lazy_function(
    http: Http, chosen: VariantInfo, allow_custom_calls: Sequence[str]
) -> Exported | None:
    """The Exported of the function variant ``chosen``, its VJP modules fetched when
    ``.vjp()`` asks; None where the server lacks the module route (see the module's doc), or
    where the primal module is over ``WHOLE_ABOVE`` of the archive (fetched alone, it would
    move about as much as the whole archive, and its VJPs more): the caller reads it whole.

    Raises:
        WrongKindError: a model archive.
        IntegrityError: the header or a module does not match its digest (the server's
            answer for a corrupt section included).
        CorruptArchiveError, UnsupportedVersionError, UnsupportedFeatureError,
            UnsafeArchiveError: as ``jaxport.loads``.
        NotFoundError, PermissionDeniedError, ServerUnavailableError: from the server.
    """
    from jaxport.export._internal import exported_from_header, module_lengths, read_prefix

    archive = RemoteArchive(http, chosen.digest, chosen.size_bytes)
    prefix = read_prefix(archive.read, archive.size)
    if module_lengths(prefix, archive.size)[0] > WHOLE_ABOVE * archive.size:
        return None  # the primal alone is most of the archive: read it whole, compressed
    modules = RemoteModules(http, archive)
    where = f"{chosen.name}:{chosen.version}"

    def fetch(index: int, length: int) -> tuple[bytes, str]:
        try:
            return modules.fetch(index, length)
        except RegistryError as e:
            if type(e) is RegistryError and index == 0:  # not a typed answer: no such route
                raise _NoRoute from None
            raise

    try:
        return exported_from_header(
            prefix, archive.size, fetch, allow_custom_calls=tuple(allow_custom_calls),
            where=where,
        )  # fmt: skip
    except _NoRoute:
        return None


class _NoRoute(Exception):
    """The server answered the module route with an HTTP error of its framework (404, 405)."""
