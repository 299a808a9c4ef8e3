"""The ASGI app of ``jaxport serve``: the API under ``/api/v1``, the pages, error answers.

The app holds one ``jaxport.Registry`` (a SQL engine and a blob store) and no other state: two
server processes over one PostgreSQL database and one blob store serve the same registry.
Routes are plain (sync) functions, run in the server's thread pool, so a slow push or audit
never blocks the event loop; module validation runs in the registry's sandbox workers, never
in the process that handles requests. Four kinds do not take those threads: a part upload
runs in the uploads' own threads, commits and gc in theirs, audits, verify, retention runs and
the watcher in others (``server/_bridge.py``), and the sign-in form is read without one; so
slow or many uploads and audits never hold up reads, and audits never hold up commits. Every
request passes ``server/_guard.py`` first.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import AsyncIterator, Sequence

import anyio
import anyio.to_thread
from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException

from jaxport import JaxportError, __version__
from jaxport._files import DEFAULT_MAX_READ
from jaxport.registry import Registry
from jaxport.registry._internal import sql_backend, sweep_commit_dirs
from jaxport.server import (
    _api_adopt,
    _api_compiled,
    _api_gates,
    _api_modules,
    _api_read,
    _api_rescue,
    _api_retention,
    _api_watch,
    _api_write,
    _errors,
    _pages,
    _presign,
)
from jaxport.server._bridge import HEAVY, LONG, UPLOADS
from jaxport.server._docs import docs_router
from jaxport.server._guard import Guard
from jaxport.server._headers import SecurityHeaders
from jaxport.server._limits import DEFAULT_MEMORY_BUDGET, MemoryBudget
from jaxport.server._webhooks import Webhooks

__all__ = ["create_app"]

API = "/api/v1"


def create_app(
    registry: Registry,
    *,
    open_read: bool = False,
    max_upload: int = DEFAULT_MAX_READ,
    webhooks: Sequence[str] = (),
    webhook_secret: str | None = None,
    memory_budget: int = DEFAULT_MEMORY_BUDGET,
) -> FastAPI:
    """The server's app over ``registry``.

    Args:
        registry: a direct ``jaxport.Registry`` (SQL database and blob store).
        open_read: reads (API and pages) need no token; writes always do.
        max_upload: the largest part one upload may send, and the most bytes a commit's
            archives may declare together (what it writes to a temporary file), in bytes
            (default 64 GiB).
        memory_budget: the bytes of memory that large JSON bodies and commits may hold at
            once in this server process (``server/_limits.py``; default half the machine's
            memory).
        webhooks: URLs each event is POSTed to (JSON), signed with ``webhook_secret``
            (``X-Jaxport-Signature: sha256=HEX``, HMAC-SHA256 of the body), retried with
            backoff (``server/_webhooks.py``).
    """
    hooks = Webhooks(webhooks, webhook_secret) if webhooks else None

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        await anyio.to_thread.run_sync(
            functools.partial(sweep_commit_dirs, sql_backend(registry).blobs)
        )  # F8
        yield
        if hooks is not None:
            hooks.close()  # what is queued is delivered (with its retries) before exit

    app = FastAPI(
        lifespan=lifespan,
        title="jaxport registry",
        version=__version__,
        openapi_url=f"{API}/openapi.json",
        docs_url=None,  # server/_docs.py: Swagger UI from fastapi-offline, not a CDN
        redoc_url=None,
    )
    app.state.registry = registry
    app.state.open_read = bool(open_read)
    app.state.max_upload = int(max_upload)
    app.state.uploads = anyio.CapacityLimiter(UPLOADS)
    app.state.token_uploads = {}  # token name -> uploads in progress (``_api_write.upload``)
    app.state.heavy = anyio.CapacityLimiter(HEAVY)
    app.state.long = anyio.CapacityLimiter(LONG)
    app.state.memory = MemoryBudget(memory_budget)
    app.state.webhooks = hooks
    if hooks is not None:
        sql_backend(registry).event_log.listeners.append(hooks.deliver)
    app.include_router(_api_read.router, prefix=API)
    app.include_router(_api_modules.router, prefix=API)  # a function archive's modules
    app.include_router(_api_write.router, prefix=API)
    app.include_router(_api_adopt.router, prefix=API)  # signatures, findings made elsewhere
    app.include_router(_api_compiled.router, prefix=API)  # compiled sets (issue 27 §2)
    app.include_router(_api_gates.router, prefix=API)
    app.include_router(_api_retention.router, prefix=API)
    app.include_router(_api_rescue.router, prefix=API)
    app.include_router(_api_watch.router, prefix=API)
    _presign.install(app, API)  # presigned transfers; bytes through this process counted
    app.include_router(_pages.router)
    app.include_router(docs_router(API), prefix=API)
    app.add_exception_handler(JaxportError, _errors.jaxport_error_handler)
    app.add_exception_handler(RequestValidationError, _errors.validation_error_handler)
    app.add_exception_handler(HTTPException, _pages.http_error_handler)  # pages: a page
    app.add_middleware(Guard)  # auth before a write's body, body limits, other errors: 500
    app.add_middleware(SecurityHeaders)  # outermost: every answer, the Guard's included
    return app
