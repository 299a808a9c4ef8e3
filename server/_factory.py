"""The app ``jaxport serve`` hands to uvicorn: made in each server process from one
environment variable (uvicorn's workers are new processes), so no secret is on a command line.
"""

from __future__ import annotations

import json
import os

from fastapi import FastAPI

__all__ = ["ENV_OPTIONS", "app_from_env", "options_to_env"]

ENV_OPTIONS = "JAXPORT_SERVE_OPTIONS"


def options_to_env(
    url: str | None, blobs: str | None, open_read: bool, webhooks: list[str], secret: str | None,
    max_upload: int | None = None, memory_budget: int | None = None,
) -> str:  # fmt: skip
    """The options of ``jaxport serve`` as the JSON ``app_from_env`` reads."""
    return json.dumps({"url": url, "blobs": blobs, "open_read": open_read,
                       "webhooks": webhooks, "webhook_secret": secret,
                       "max_upload": max_upload, "memory_budget": memory_budget})  # fmt: skip


def app_from_env() -> FastAPI:
    """The server's app from ``$JAXPORT_SERVE_OPTIONS`` (default: the default registry), in
    a process whose floods of log lines are rate-limited (``server/_connections.py``)."""
    from jaxport.registry import Registry
    from jaxport.server import create_app
    from jaxport.server._connections import install_log_limits

    install_log_limits()

    options = json.loads(os.environ.get(ENV_OPTIONS, "{}"))
    registry = Registry(options.get("url"), blobs=options.get("blobs"))
    limits = {k: options[k] for k in ("max_upload", "memory_budget") if options.get(k)}
    return create_app(
        registry, open_read=bool(options.get("open_read")),
        webhooks=options.get("webhooks") or (), webhook_secret=options.get("webhook_secret"),
        **limits,
    )  # fmt: skip
