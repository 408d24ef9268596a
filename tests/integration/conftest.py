"""Fixtures the integration tests share: a real moto server on loopback (tests/moto_server.py),
started once per test module and emptied before each test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.moto_server import MotoServer, moto_server


@pytest.fixture(scope="module")
def server() -> Iterator[MotoServer]:
    with moto_server() as m:
        yield m


@pytest.fixture
def moto(server: MotoServer) -> MotoServer:
    server.reset()
    return server
