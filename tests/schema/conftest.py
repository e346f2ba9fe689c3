"""Fixtures of the schema tests: the shipped tokenizer and the default schema."""

from __future__ import annotations

import pytest

from blockplan.schema import DrivingSchema, JsonTokenizer, default_schema, default_tokenizer


@pytest.fixture(scope="session")
def tokenizer() -> JsonTokenizer:
    return default_tokenizer()


@pytest.fixture(scope="session")
def schema() -> DrivingSchema:
    return default_schema()
