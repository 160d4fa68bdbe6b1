"""`toolscript.__version__` is the version the project declares."""

from __future__ import annotations

import tomllib
from pathlib import Path

import toolscript


def test_the_version_is_the_one_pyproject_declares() -> None:
    pyproject = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    assert toolscript.__version__ == pyproject["project"]["version"]
    assert "__version__" in toolscript.__all__
