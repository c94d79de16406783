"""Retention's settings: days by tenant read as written, a bad entry refused at start-up
naming the variable and the entry."""

from __future__ import annotations

import pytest

from brainhands.brain.retention import Retention, tenant_days
from brainhands.brain.settings import BrainSettings
from brainhands.shared.config import load_settings
from brainhands.shared.errors import ConfigurationError


def test_days_by_tenant_are_read_as_written() -> None:
    assert tenant_days("") == {}
    assert tenant_days(" acme=7, globex=0.5 ,") == {"acme": 7.0, "globex": 0.5}
    for bad in ("acme", "acme=", "acme=-1", "acme=soon", "a cme=3", "acme=nan", "acme=inf"):
        with pytest.raises(ValueError, match="is not tenant=days"):
            tenant_days(bad)


def test_retention_keeps_everything_unless_some_days_are_set() -> None:
    assert Retention().keeps_all and Retention(0, {"acme": 0}).keeps_all
    assert not Retention(30).keeps_all and not Retention(0, {"acme": 7}).keeps_all


def test_a_bad_retention_fails_at_start_up_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("BRAINHANDS_RETENTION_TENANT_DAYS", "acme=7,globex=later")
    with pytest.raises(ConfigurationError, match=r"BRAINHANDS_RETENTION_TENANT_DAYS: .*globex"):
        load_settings(BrainSettings)
    monkeypatch.setenv("BRAINHANDS_RETENTION_TENANT_DAYS", "acme=7")
    monkeypatch.setenv("BRAINHANDS_RETENTION_DAYS", "-1")
    with pytest.raises(ConfigurationError, match="BRAINHANDS_RETENTION_DAYS"):
        load_settings(BrainSettings)
    monkeypatch.setenv("BRAINHANDS_RETENTION_DAYS", "30")
    assert load_settings(BrainSettings).retention == Retention(30, {"acme": 7})
