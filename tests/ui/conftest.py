"""Fixtures of the screen tests: a clock in UTC for snapshots, and the interface in Chinese."""

from __future__ import annotations

import time

import pytest

from gputui.i18n import set_language


@pytest.fixture
def utc_clock(monkeypatch: pytest.MonkeyPatch):
    """Local time is UTC, so that snapshots showing clock times are the same everywhere."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


@pytest.fixture
def zh():
    """The interface in Chinese from before the app starts (tests/conftest.py puts English back
    after every test)."""
    set_language("zh")
    yield
    set_language("en")
