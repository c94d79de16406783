"""The fenced code blocks of the project's Markdown documents, for the tests that run them."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Block:
    line: int
    """The document's line of the block's first line of code."""
    info: list[str]
    code: str


def fenced_blocks(path: Path) -> list[Block]:
    blocks, opened, info, lines = [], 0, [], []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if not opened and line.startswith("```"):
            opened, info, lines = number, line[3:].split(), []
        elif opened and line.rstrip() == "```":
            blocks.append(Block(opened + 1, info, "\n".join(lines) + "\n"))
            opened = 0
        elif opened:
            lines.append(line)
    assert not opened, f"{path.name}:{opened}: a code fence is never closed"
    return blocks


def python_blocks(path: Path) -> list[Block]:
    return [b for b in fenced_blocks(path) if b.info and b.info[0] in ("python", "py")]
