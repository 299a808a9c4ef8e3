"""The app a page test's server process runs: ``python -m uvicorn --factory
_pages_app:make_app --app-dir tests`` (``tests/test_server_pages.py``).

The registry comes from the environment: ``JAXPORT_TEST_PAGES_REGISTRY`` (a database URL) and
``JAXPORT_TEST_PAGES_BLOBS`` (a blob store); ``JAXPORT_TEST_PAGES_OPEN_READ=1`` serves reads
without a token.
"""

from __future__ import annotations

import os
from typing import Any

REGISTRY_ENV = "JAXPORT_TEST_PAGES_REGISTRY"
BLOBS_ENV = "JAXPORT_TEST_PAGES_BLOBS"
OPEN_READ_ENV = "JAXPORT_TEST_PAGES_OPEN_READ"


def make_app() -> Any:
    """``create_app`` over the registry the environment names."""
    from jaxport import Registry
    from jaxport.server import create_app

    registry = Registry(os.environ[REGISTRY_ENV], blobs=os.environ[BLOBS_ENV])
    return create_app(registry, open_read=os.environ.get(OPEN_READ_ENV) == "1")
