"""The root distribution's dependencies: its own and those of the roles its wheel holds.

``pip install .`` (or ``git+<url>``) builds one wheel of the whole of brainhands: the client,
the API and the CLI (``src/``) with the core, the Brain and the Hands from their folders
(``[tool.hatch.build.targets.wheel] packages``). Those folders stay distributions of their
own, each with its ``pyproject.toml``, for the images that install one role. This hook,
hatchling's ``custom`` metadata hook, reads those files so that the whole requires what its
roles require, each list written once: the root's own dependencies and extras are in
``[tool.hatch.metadata.hooks.custom]``, and a role's extra (the Hands' ``mcp``) joins the
root's extra of the same name. The roles' requirements of one another are left out, as the
wheel holds them.

An editable install (``scripts/setup``) puts ``src/`` alone on the path
(``dev-mode-dirs``), beside the roles' own editable installs: the build hook below makes it
require them, so that ``pip install -e .`` without them fails saying what is missing.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from hatchling.builders.config import BuilderConfig
from hatchling.builders.hooks.plugin.interface import BuildHookInterface
from hatchling.metadata.plugin.interface import MetadataHookInterface
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROLES = ("shared", "brain", "hands")
"""The folders whose packages the root's wheel holds (brainhands-examples stays apart)."""


class WholeMetadata(MetadataHookInterface):
    """The hook itself: hatchling finds it in this file (``[tool.hatch.metadata.hooks.custom]``)."""

    def update(self, metadata: dict[str, Any]) -> None:
        metadata["dependencies"], metadata["optional-dependencies"] = requirements_of_the_whole(
            self.config.get("dependencies", []),
            self.config.get("optional-dependencies", {}),
            read_roles(Path(self.root)),
        )


class EditableRoles(BuildHookInterface[BuilderConfig]):
    """The wheel's build hook (``[tool.hatch.build.targets.wheel.hooks.custom]``): an
    editable install holds ``src/`` alone, so it requires each role's own distribution."""

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if version == "editable":
            build_data["dependencies"] += [
                f"{role['name']}=={role['version']}" for role in read_roles(Path(self.root))
            ]


def read_roles(root: Path) -> list[dict[str, Any]]:
    """The ``[project]`` table of each role's ``pyproject.toml``."""
    return [
        tomllib.loads((root / folder / "pyproject.toml").read_text(encoding="utf-8"))["project"]
        for folder in ROLES
    ]


def requirements_of_the_whole(
    own: list[str], own_extras: dict[str, list[str]], roles: list[dict[str, Any]]
) -> tuple[list[str], dict[str, list[str]]]:
    """The dependencies and extras of a distribution that holds ``roles`` (their
    ``[project]`` tables) beside its ``own``: each requirement once, none of a held role."""
    held: set[str] = {canonicalize_name(role["name"]) for role in roles}
    dependencies = list(own)
    extras = {name: list(requirements) for name, requirements in own_extras.items()}
    for role in roles:
        dependencies += role.get("dependencies", [])
        for extra, requirements in role.get("optional-dependencies", {}).items():
            if extra not in extras:
                raise ValueError(
                    f"{role['name']}'s extra {extra!r} has no namesake among the root's "
                    f"(pyproject.toml, [tool.hatch.metadata.hooks.custom.optional-dependencies]): "
                    f"add it there, so that the whole offers it too"
                )
            extras[extra] += requirements
    return once_each(dependencies, held), {
        name: once_each(requirements, held) for name, requirements in extras.items()
    }


def once_each(requirements: list[str], held: set[str]) -> list[str]:
    """``requirements`` in their order, each once, without those of ``held`` distributions."""
    kept: dict[str, str] = {}
    for text in requirements:
        requirement = Requirement(text)
        if canonicalize_name(requirement.name) not in held:
            kept.setdefault(str(requirement), text)
    return list(kept.values())
