"""The server's web pages (read-only, server-rendered with Jinja2)."""

from __future__ import annotations

from fastapi import APIRouter

__all__ = ["router"]

router = APIRouter()
