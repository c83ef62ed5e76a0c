"""The one factor that stretches the limits on starting work (dtgui.core.time_limits)."""

from __future__ import annotations

import pytest

from dtgui.core.time_limits import FACTOR_VARIABLE, start_limit


@pytest.mark.parametrize(("value", "expected"), [("1", 60.0), ("2.5", 150.0), ("", 60.0),
                                                 ("slow", 60.0), ("0", 60.0), ("-3", 60.0)])
def test_the_factor_stretches_a_limit_and_a_bad_value_counts_as_one(
        monkeypatch: pytest.MonkeyPatch, value: str, expected: float) -> None:
    monkeypatch.setenv(FACTOR_VARIABLE, value)
    assert start_limit(60.0) == expected


def test_no_factor_is_the_limit_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(FACTOR_VARIABLE)
    assert start_limit(45.0) == 45.0
