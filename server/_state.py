"""The one place a request finds the server's ``Registry`` (``app.state.registry``, set by
``create_app`` in ``server/_app.py``); every API router and the pages read it through
``registry_of``."""

from __future__ import annotations

from fastapi import Request

from jaxport.registry import Registry

__all__ = ["registry_of"]


def registry_of(request: Request) -> Registry:
    """The registry the app serving ``request`` was made with."""
    registry: Registry = request.app.state.registry
    return registry
