"""The README cannot rot: every Python block in it runs, and its settings table is the
settings the processes read.

A Python block runs as written, in a fresh interpreter (its ``@tool`` and ``TaskKind``
registrations are the real ones, into registries no other test shares), after a prelude
that supplies only what the README leaves to the reader (``service()``). A block that
truly cannot run says so on its fence line: ```` ```python no-run ````.
"""

from __future__ import annotations

import ast
import inspect
import json
import os
import re
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from pydantic_settings import BaseSettings

from tests.helpers.markdown import Block, python_blocks

README = Path(__file__).resolve().parents[1] / "README.md"
NO_RUN = "no-run"

PRELUDE = '''
class _Service:
    """The reader's client of their external system."""

    async def send(self, key: str, *details: str) -> str:
        return f"receipt-{key}"

    async def lookup(self, key: str) -> str | None:
        return None


def service() -> _Service:
    return _Service()
'''
"""Names the README's blocks use without defining them, because the reader supplies them.
Only such names: a brainhands name a block uses must be imported by the block itself."""

RUNNER = textwrap.dedent(
    """
    import ast, asyncio, inspect, json, sys

    import brainhands

    job = json.load(sys.stdin)
    namespace = {"__name__": "readme"}
    exec(compile(job["prelude"], "<prelude>", "exec"), namespace)
    lent = set(namespace) - {"__name__", "__builtins__"}
    shadowed = sorted(lent & set(brainhands.__all__))
    assert not shadowed, f"the prelude must not supply brainhands names: {shadowed}"
    # Padded so that a traceback names the README's own line numbers.
    source = "\\n" * (job["line"] - 1) + job["code"]
    code = compile(source, job["file"], "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    ran = eval(code, namespace)
    if inspect.iscoroutine(ran):  # the block awaits at top level, as in an asyncio REPL
        asyncio.run(ran)
    """
)


PYTHON_BLOCKS = python_blocks(README)


def test_the_readme_has_python_blocks_and_no_unknown_fence_markers() -> None:
    assert len(PYTHON_BLOCKS) >= 2  # the tool and the task kind: the parsing found them
    for block in PYTHON_BLOCKS:
        unknown = set(block.info[1:]) - {NO_RUN}
        assert not unknown, f"README.md:{block.line - 1}: unknown fence marker(s) {unknown}"


@pytest.mark.parametrize("block", PYTHON_BLOCKS, ids=[f"line{b.line - 1}" for b in PYTHON_BLOCKS])
def test_a_python_block_of_the_readme_runs(block: Block, tmp_path: Path) -> None:
    if NO_RUN in block.info:
        pytest.skip(f"README.md:{block.line - 1} is marked {NO_RUN}")
    job = {"prelude": PRELUDE, "code": block.code, "line": block.line, "file": str(README)}
    done = subprocess.run(
        [sys.executable, "-c", RUNNER],
        input=json.dumps(job),
        cwd=tmp_path,
        env=dict(os.environ),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, f"README.md:{block.line - 1}: the block fails\n{done.stderr}"


# The settings table.

TABLE_HEADER = "| variable | default | meaning |"

DISCOVER = textwrap.dedent(
    """
    import importlib, json, pkgutil

    from pydantic_settings import BaseSettings

    import brainhands

    for module in pkgutil.walk_packages(brainhands.__path__, "brainhands."):
        if module.name.endswith("__main__") or ".migrations." in module.name:
            continue
        importlib.import_module(module.name)

    def subclasses(cls):
        for sub in cls.__subclasses__():
            yield sub
            yield from subclasses(sub)

    found = {
        f"{cls.__module__}:{cls.__qualname__}"
        for cls in subclasses(BaseSettings)
        if str(cls.model_config.get("env_prefix", "")).startswith("BRAINHANDS_")
    }
    print(json.dumps(sorted(found)))
    """
)


@dataclass(frozen=True)
class Row:
    variable: str
    default: str
    meaning: str


def settings_table() -> list[Row]:
    lines = README.read_text().splitlines()
    assert lines.count(TABLE_HEADER) == 1, f"README.md has no single {TABLE_HEADER!r} table"
    start = lines.index(TABLE_HEADER) + 2  # past the |---| line
    rows = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        variable, default, meaning = (cell.strip() for cell in line.strip().strip("|").split("|"))
        named = re.fullmatch(r"`(BRAINHANDS_[A-Z0-9_]+)`", variable)
        assert named, f"one `BRAINHANDS_*` variable per row of the settings table: {line}"
        assert meaning, f"{variable} has no meaning in the settings table"
        rows.append(Row(named[1], default, meaning))
    return rows


def settings_classes() -> list[type[BaseSettings]]:
    """Every settings class of the package, found by importing all of it (in a process of
    its own, so that no module's registrations leak into this one)."""
    done = subprocess.run(
        [sys.executable, "-c", DISCOVER], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    classes = []
    for found in json.loads(done.stdout):
        module, name = found.split(":")
        classes.append(getattr(__import__(module, fromlist=[name]), name))
    return classes


def attribute_docs(cls: type) -> dict[str, str]:
    """The docstrings under a class's fields (and its bases'), where it has them."""
    docs: dict[str, str] = {}
    for klass in reversed([k for k in cls.__mro__ if issubclass(k, BaseSettings)][:-1]):
        body = ast.parse(textwrap.dedent(inspect.getsource(klass))).body[0]
        assert isinstance(body, ast.ClassDef)
        for field, doc in zip(body.body, body.body[1:], strict=False):
            if (
                isinstance(field, ast.AnnAssign)
                and isinstance(field.target, ast.Name)
                and isinstance(doc, ast.Expr)
                and isinstance(doc.value, ast.Constant)
                and isinstance(doc.value.value, str)
            ):
                docs[field.target.id] = " ".join(doc.value.value.split())
    return docs


def simple(value: Any) -> bool:
    return isinstance(value, str | int | float | bool)


def test_the_settings_table_names_every_setting_with_its_default(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in [n for n in os.environ if n.startswith("BRAINHANDS_")]:
        monkeypatch.delenv(name)
    classes = settings_classes()
    assert {c.__name__ for c in classes} >= {
        "CommonSettings",
        "BrainSettings",
        "HandsSettings",
        "ModelSettings",
    }
    settings: dict[str, list[tuple[type[BaseSettings], str]]] = {}
    for cls in classes:
        prefix = str(cls.model_config["env_prefix"])
        for field in cls.model_fields:
            settings.setdefault(f"{prefix}{field.upper()}", []).append((cls, field))
    rows = {row.variable: row for row in settings_table()}

    missing = sorted(set(settings) - set(rows))
    suggested = []
    for variable in missing:
        cls, field = settings[variable][0]
        default = cls.model_fields[field].default
        shown = f"`{default}`" if simple(default) else "(none)"
        meaning = cls.model_fields[field].description or attribute_docs(cls).get(field, "?")
        suggested.append(f"| `{variable}` | {shown} | {meaning} |")
    assert not missing, "settings missing from README.md's table:\n" + "\n".join(suggested)
    assert not set(rows) - set(settings), f"not settings: {sorted(set(rows) - set(settings))}"

    for variable, row in rows.items():
        shown = re.match(r"`([^`]*)`", row.default)
        for cls, field in settings[variable]:
            default = cls.model_fields[field].default
            if not simple(default):
                assert shown is None, f"{variable}: {cls.__name__} has no simple default"
                continue
            assert shown, f"{variable}: the table shows no default; {cls.__name__}: {default!r}"
            # The default as the reader would write it, read as the process would read it.
            read = getattr(cls(**{field: shown[1]}), field)
            assert read == default, (
                f"{variable}: the table shows {shown[1]!r}, {cls.__name__} {default!r}"
            )
