"""``GET /api/v1/blobs/{digest}/modules/{index}`` (scope ``read``): one module of a function
archive, so that a client reads the archive's header by ranges and fetches the VJP modules
only when ``.vjp()`` asks (``registry/_remote_function.py``).

The archive is read with jaxport's own reader (``jaxport.export._internal.module_of``): the
header checked against the digest in its preamble, the module's section against its sha256
before any byte of it is used, its declared size within the compression-ratio limit, then
decompressed up to the module's end. The answer is the module's bytes (``Content-Length``)
with ``X-Jaxport-Module-Sha256``, the sha256 (hex) of those bytes, which the client checks.

Who may read it is decided as for ``GET /blobs/{digest}``: a prefix-limited token reads the
archives of its names' versions only (404 otherwise, as for a blob it may not see). A corrupt
archive is the ``IntegrityError`` answer (422); a model archive a ``WrongKindError`` (409); an
index past the archive's VJP orders a ``NotFoundError`` (404) that says how many it holds.
The section's stored bytes and the module's are held under the server's memory budget
(``jaxport serve --memory-budget``).
"""

from __future__ import annotations

import contextlib
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Request
from fastapi.responses import Response

from jaxport import NotFoundError
from jaxport.export._internal import module_of
from jaxport.registry import TokenInfo
from jaxport.registry._internal import sql_backend
from jaxport.server._auth import scope
from jaxport.server._errors import RESPONSES
from jaxport.server._limits import MemoryBudget
from jaxport.server._state import registry_of

__all__ = ["MODULE_SHA256", "router"]

#: The answer's header that carries the sha256 (hex) of the module's bytes.
MODULE_SHA256 = "X-Jaxport-Module-Sha256"

router = APIRouter(responses=RESPONSES)
Reader = Annotated[TokenInfo, Depends(scope("read"))]

_MODULE: dict[int | str, dict[str, Any]] = {
    200: {
        "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}},
        "description": f"The module's bytes (MLIR bytecode); {MODULE_SHA256}: their sha256",
    },
}


@router.get("/blobs/{digest}/modules/{index}", response_class=Response, responses=_MODULE)
def module(
    request: Request, p: Reader, digest: str, index: Annotated[int, Path(ge=0, le=1 << 16)]
) -> Response:
    """Module ``index`` of the function archive ``digest`` (0: the primal, k: the VJP of
    order k), decompressed and checked as ``jaxport.loads`` checks it (see the module's doc)."""
    reg = registry_of(request)
    stream = reg.blob_stream(digest)
    if p.prefixes and not any(map(p.allows_name, sql_backend(reg).queries.names_holding(digest))):
        raise NotFoundError(f"no blob or archive {digest}")

    def read_range(start: int, end: int) -> bytes:
        return b"".join(stream.chunks(start, end))

    def hold(nbytes: int) -> contextlib.AbstractContextManager[None]:
        budget: MemoryBudget | None = getattr(request.app.state, "memory", None)
        if budget is None:
            return contextlib.nullcontext()
        return budget.reserve(nbytes, f"module {index} of {digest}")

    data, sha256 = module_of(read_range, stream.size, index, where=f"blob {digest}", hold=hold)
    headers = {MODULE_SHA256: sha256, "Content-Length": str(len(data))}
    return Response(data, headers=headers, media_type="application/octet-stream")
