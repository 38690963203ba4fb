"""One Spark session for the whole test run: small shuffle partitions, UI off."""

from __future__ import annotations

import pytest

from sparkcq import Engine
from sparkcq.session import make_session


@pytest.fixture(scope="session")
def spark():
    session = make_session("local[2]", app_name="sparkcq-tests", shuffle_partitions=2)
    yield session
    session.stop()


@pytest.fixture
def engine(spark):
    """A fresh engine (its own catalog and plan) on the shared session."""
    return Engine(spark=spark)
