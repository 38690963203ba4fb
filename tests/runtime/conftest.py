"""Fixtures shared by the runtime tests."""

from __future__ import annotations

import pytest

from sparkcq.runtime.frames import SqlViews
from sparkcq.runtime.templates import forget_shared


@pytest.fixture
def analyses(monkeypatch, spark):
    """The texts each ``SqlViews`` analysed (rather than re-bound), in order."""
    seen: list[str] = []
    original = SqlViews.analyse
    forget_shared(spark)  # no template an earlier test made

    def analyse(self, template, views):
        seen.append(template)
        return original(self, template, views)

    monkeypatch.setattr(SqlViews, "analyse", analyse)
    return seen
