"""What the command's tests share."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


@pytest.fixture
def embedded_deployment(
    rabbitmq_url: str, namespace: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Path:
    """The environment of a ``brainhands`` command run in this process on the embedded
    store (``./brainhands.db`` in ``tmp_path``, its working directory) and a broker topology
    of its own; no other ``BRAINHANDS_`` setting. Returns ``tmp_path``."""
    for name in [n for n in os.environ if n.startswith("BRAINHANDS_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("BRAINHANDS_RABBITMQ_URL", rabbitmq_url)
    monkeypatch.setenv("BRAINHANDS_NAMESPACE", namespace)
    monkeypatch.chdir(tmp_path)
    return tmp_path
