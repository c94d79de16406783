"""``brainhands`` in a process where ``brainhands.hands`` cannot be imported, nor any module
that needs it (every tool module does).

    python -m tests.helpers.brain_without_hands brain --compat v1 --agents ...

A Brain run this way proves it knows tools only by their declarations in the store.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from collections.abc import Sequence
from types import ModuleType

from brainhands.cli import main

FORBIDDEN = "brainhands.hands"


class RefuseTheHands(importlib.abc.MetaPathFinder):
    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname == FORBIDDEN or fullname.startswith(FORBIDDEN + "."):
            raise ImportError(f"{fullname} is not importable in this Brain process")
        return None


if __name__ == "__main__":
    if any(name == FORBIDDEN or name.startswith(FORBIDDEN + ".") for name in sys.modules):
        raise SystemExit(f"{FORBIDDEN} was imported before it could be refused")
    sys.meta_path.insert(0, RefuseTheHands())
    sys.exit(main())
