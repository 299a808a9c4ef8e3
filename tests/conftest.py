"""Test set-up: 8 fake CPU devices (set before jax is imported) and shared helpers."""

from __future__ import annotations

import os

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")

import jax
import pytest


@pytest.fixture
def x64():
    """Enables 64-bit types for one test."""
    previous = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", True)
    try:
        yield
    finally:
        jax.config.update("jax_enable_x64", previous)
