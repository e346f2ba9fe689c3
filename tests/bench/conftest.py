"""Tiny models: one torch thread (the fixture of tests/decoding/conftest.py)."""

from tests.decoding.conftest import _one_thread  # noqa: F401
