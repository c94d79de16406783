"""The root distribution's requirements (hatch_build.py): its own and its roles', each once,
none of a role its wheel holds; a role's extra joins the root's of the same name."""

from __future__ import annotations

import tomllib

import pytest

from hatch_build import ROLES, WholeMetadata, requirements_of_the_whole
from tests.helpers.processes import ROOT

CORE = {"name": "brainhands-core", "dependencies": ["redis>=5,<9", "pydantic>=2.6,<3"]}
BRAIN = {"name": "brainhands-brain", "dependencies": ["brainhands-core==0.1.0", "httpx>=0.27,<1"]}
HANDS = {
    "name": "brainhands_hands",  # any spelling of a name is the name
    "dependencies": ["Brainhands-Core==0.1.0"],
    "optional-dependencies": {"mcp": ["mcp>=2.3,<3", "pyyaml>=6,<7"]},
}


def test_the_whole_requires_its_own_and_its_roles_requirements_once_in_order() -> None:
    dependencies, extras = requirements_of_the_whole(
        ["httpx>=0.27,<1", "fastapi>=0.115,<1"],
        {"mcp": ["mcp>=2.3,<3"], "bench": ["celery>=5.3,<6"]},
        [CORE, BRAIN, HANDS],
    )
    assert dependencies == [
        "httpx>=0.27,<1",
        "fastapi>=0.115,<1",
        "redis>=5,<9",
        "pydantic>=2.6,<3",
    ]
    assert extras == {"mcp": ["mcp>=2.3,<3", "pyyaml>=6,<7"], "bench": ["celery>=5.3,<6"]}


def test_a_requirement_of_another_version_of_the_same_project_is_kept() -> None:
    dependencies, _ = requirements_of_the_whole(["httpx>=0.28,<1"], {}, [CORE, BRAIN])
    assert dependencies == ["httpx>=0.28,<1", "redis>=5,<9", "pydantic>=2.6,<3", "httpx>=0.27,<1"]


def test_a_role_extra_without_a_namesake_in_the_root_is_refused() -> None:
    with pytest.raises(ValueError, match="brainhands_hands's extra 'mcp' has no namesake"):
        requirements_of_the_whole([], {"bench": []}, [HANDS])


def test_the_checkouts_metadata_is_what_the_roles_pyproject_files_say() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["hatch"]["metadata"]
    metadata: dict[str, object] = {}
    WholeMetadata(str(ROOT), config["hooks"]["custom"]).update(metadata)
    dependencies = metadata["dependencies"]
    assert isinstance(dependencies, list)
    assert not [d for d in dependencies if d.lower().startswith("brainhands")]
    for folder in ROLES:
        role = tomllib.loads((ROOT / folder / "pyproject.toml").read_text())["project"]
        assert {d for d in role["dependencies"] if not d.startswith("brainhands")} <= set(
            dependencies
        )
    extras = metadata["optional-dependencies"]
    assert isinstance(extras, dict)
    assert extras["mcp"] == ["mcp>=2.3,<3", "pyyaml>=6,<7"]  # the root's, then the Hands'
