"""Fixtures shared by the runtime tests."""

from __future__ import annotations

import pytest

from sparkcq.runtime.frames import SqlViews


@pytest.fixture
def analyses(monkeypatch):
    """The texts each ``SqlViews`` analysed (rather than re-bound), in order."""
    seen: list[str] = []
    original = SqlViews.analyse

    def analyse(self, template, views):
        seen.append(template)
        return original(self, template, views)

    monkeypatch.setattr(SqlViews, "analyse", analyse)
    return seen
