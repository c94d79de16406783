"""The project the coder fixes: a module with a bug, and the tests that find it."""

from __future__ import annotations

import io
import tarfile

FAULTY = "calc.py"
FILES = {
    "calc.py": 'def add(a, b):\n    """The sum of a and b."""\n    return a - b\n',
    "test_calc.py": (
        "import unittest\n\nfrom calc import add\n\n\n"
        "class AddTest(unittest.TestCase):\n"
        "    def test_add(self):\n"
        "        self.assertEqual(add(2, 3), 5)\n\n"
        "    def test_add_negative(self):\n"
        "        self.assertEqual(add(-1, 1), 0)\n"
    ),
    "README.md": "# calc\n\nAdds numbers.\n",
}
FIXED = FILES[FAULTY].replace("a - b", "a + b")
"""What the model rewrites the faulty file to."""


def tarball() -> bytes:
    """The project as a gzipped tar archive: the workspace's first version."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as archive:
        for path, text in FILES.items():
            data = text.encode()
            info = tarfile.TarInfo(path)
            info.size, info.mode = len(data), 0o644
            archive.addfile(info, io.BytesIO(data))
    return out.getvalue()
