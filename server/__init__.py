"""The registry server: ``jaxport serve``, an HTTP API (``/api/v1``), bearer tokens and pages.

``create_app(registry)`` gives the ASGI app over a ``jaxport.Registry``; ``jaxport serve`` runs
it with uvicorn (``app_from_env``, the app of the options ``jaxport serve`` puts in
``ENV_OPTIONS``). Needs ``jaxport[server]`` (FastAPI, uvicorn, Jinja2). Each public name is
listed once, as an import below (``jaxport._lazy``).
"""

from __future__ import annotations

from jaxport._lazy import attach
from jaxport.server._app import create_app as create_app
from jaxport.server._connections import KEEP_ALIVE as KEEP_ALIVE
from jaxport.server._connections import MAX_HEAD as MAX_HEAD
from jaxport.server._connections import DeadlineH11Protocol as DeadlineH11Protocol
from jaxport.server._connections import connection_cap as connection_cap
from jaxport.server._connections import raise_open_file_limit as raise_open_file_limit
from jaxport.server._factory import ENV_OPTIONS as ENV_OPTIONS
from jaxport.server._factory import app_from_env as app_from_env
from jaxport.server._factory import options_to_env as options_to_env
from jaxport.server._presign import configured_expires as configured_expires
from jaxport.server._webhooks import Webhooks as Webhooks

__all__, __getattr__, __dir__ = attach(__name__)
