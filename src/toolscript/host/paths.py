"""What an interpreter must see of the host's files: its Python's folders, and the system's.

Read from the files, without running the interpreter: a broken Python still gets a sandbox,
and its start fails there as it would anywhere.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Mapping

SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32")
"""The system's folders, shown read-only in every sandbox."""

_paths_cache: dict[tuple[str, str], list[str]] = {}


def python_paths(python: str, env: Mapping[str, str]) -> list[str]:
    """The folders an interpreter needs to see: its prefixes (a virtual environment's and
    the Python it was made from), the folders its `.pth` files add (editable installs), and
    `PYTHONPATH`. Read from the files, without running it: a broken Python still gets a
    sandbox, and its start fails there as it would anywhere."""
    extra = env.get("PYTHONPATH", "")
    key = (python, extra)
    cached = _paths_cache.get(key)
    if cached is not None:
        return cached
    found: list[str] = []
    for path in {os.path.abspath(python), os.path.realpath(python)}:
        found += _with_prefix(os.path.dirname(path))
    for prefix in list(found):
        config = os.path.join(prefix, "pyvenv.cfg")
        try:
            with open(config) as file:
                for line in file:
                    name, _, value = line.partition("=")
                    if name.strip() == "home" and value.strip():
                        found += _with_prefix(os.path.realpath(value.strip()))
        except OSError:
            pass
    for prefix in list(found):
        for pth in glob.glob(os.path.join(prefix, "lib", "python3*", "site-packages", "*.pth")):
            found += _pth_folders(pth)
    found += [path for path in extra.split(os.pathsep) if path]
    paths: list[str] = []
    for path in found:
        if not path or not os.path.isabs(path) or not os.path.exists(path):
            continue
        for candidate in {os.path.abspath(path), os.path.realpath(path)}:
            if candidate == "/" or any(under(candidate, kept) for kept in (*SYSTEM, *paths)):
                continue
            paths = [kept for kept in paths if not under(kept, candidate)]
            paths.append(candidate)
    _paths_cache[key] = paths
    return paths


# Goal: the sandbox shows a Python's installation and nothing else of the folders around it.
# What fails: taking the folder above a Python's binary folder as its prefix: for a Python
# linked from `~/.local/bin` (as `uv python install` and pipx make them) or kept in `~/bin`,
# that is `~/.local` or the home itself, with the state directory's journal, keys and
# keyrings. What we do: the folder above counts only when it is a prefix by Python's own
# landmarks: a virtual environment's `pyvenv.cfg`, or a standard library's `os.py`.
def _with_prefix(binary: str) -> list[str]:
    """`binary` (a folder holding a Python), and the folder above it if that is its prefix."""
    prefix = os.path.dirname(binary)
    landmarks = [os.path.join(prefix, "pyvenv.cfg")]
    landmarks += glob.glob(os.path.join(glob.escape(prefix), "lib*", "python3*", "os.py"))
    if any(os.path.isfile(landmark) for landmark in landmarks):
        return [binary, prefix]
    return [binary]


def _pth_folders(pth: str) -> list[str]:
    """The folders a `.pth` file adds to the import path (its lines that are folders)."""
    try:
        with open(pth) as file:
            lines = file.read().splitlines()
    except (OSError, UnicodeDecodeError):
        return []
    folders = []
    for line in lines:
        line = line.strip()
        if line and not line.startswith(("#", "import ", "import\t")):
            folder = os.path.join(os.path.dirname(pth), line)
            if os.path.isdir(folder):
                folders.append(os.path.realpath(folder))
    return folders


def merge(*lists: list[str]) -> list[str]:
    """The folders of `lists`, each once, none inside another that is kept."""
    paths: list[str] = []
    for path in (path for found in lists for path in found):
        if not any(under(path, kept) for kept in paths):
            paths = [kept for kept in paths if not under(kept, path)]
            paths.append(path)
    return paths


def under(path: str, folder: str) -> bool:
    """Whether `path` is `folder` or inside it."""
    return path == folder or path.startswith(folder.rstrip("/") + "/")
