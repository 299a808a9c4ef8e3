"""The registry server: ``jaxport serve``, an HTTP API (``/api/v1``), bearer tokens and pages.

``create_app(registry)`` gives the ASGI app over a ``jaxport.Registry``; ``jaxport serve`` runs
it with uvicorn. Needs ``jaxport[server]`` (FastAPI, uvicorn, Jinja2).
"""

from __future__ import annotations

from jaxport.server._app import create_app

__all__ = ["create_app"]
