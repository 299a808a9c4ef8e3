"""The API's documentation page, ``/api/v1/docs``: Swagger UI served by this server.

FastAPI's own page loads Swagger UI from a CDN (blank offline, and a third-party script on the
origin whose cookie reads the API). Here its files come from the ``fastapi-offline`` package
(``jaxport[server]``; Swagger UI 5, which reads the OpenAPI 3.1 document FastAPI writes; the
``swagger-ui-bundle`` package's 4.15 cannot) under ``/api/v1/docs/assets/``, an allow-list of
the three files the page uses, and the page starts it with ``/api/v1/docs/init.js``
(``server/static/swagger-init.js``): no inline script, so the page's Content-Security-Policy
(``server/_headers.py``) allows scripts from this origin only.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import FileResponse, HTMLResponse

from jaxport import NotFoundError

__all__ = ["ASSETS", "DOCS", "docs_router"]

#: The page's path, under the API's prefix.
DOCS = "/docs"
#: The Swagger UI files served, with their media types.
ASSETS = {
    "swagger-ui-bundle.js": "text/javascript",
    "swagger-ui.css": "text/css",
    "favicon.png": "image/png",
}

_INIT = Path(__file__).resolve().parent / "static" / "swagger-init.js"
_PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>jaxport registry API</title>
<link rel="stylesheet" href="{prefix}/docs/assets/swagger-ui.css">
<link rel="icon" type="image/png" href="{prefix}/docs/assets/favicon.png">
</head>
<body>
<div id="swagger-ui" data-openapi-url="{prefix}/openapi.json"></div>
<script src="{prefix}/docs/assets/swagger-ui-bundle.js"></script>
<script src="{prefix}/docs/init.js"></script>
</body>
</html>
"""


def _bundle() -> Path:
    import fastapi_offline

    return Path(fastapi_offline.__file__).resolve().parent / "static"


def docs_router(prefix: str) -> APIRouter:
    """The page and its assets, for an API mounted at ``prefix`` (``/api/v1``)."""
    page = _PAGE.format(prefix=prefix)
    bundle = _bundle()
    router = APIRouter(include_in_schema=False)

    @router.get(DOCS, response_class=HTMLResponse)
    def docs() -> HTMLResponse:
        return HTMLResponse(page)

    @router.get(DOCS + "/init.js")
    def init() -> FileResponse:
        return FileResponse(_INIT, media_type="text/javascript")

    @router.get(DOCS + "/assets/{name}")
    def asset(name: str) -> FileResponse:
        media = ASSETS.get(name)
        if media is None:
            raise NotFoundError("no such documentation asset")
        return FileResponse(bundle / name, media_type=media)

    return router
