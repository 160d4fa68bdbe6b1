"""Which global names a shell's namespace holds, told to the host as they change.

The host checks a script before it runs (`toolscript.tools.check`), and a shell is
persistent: a variable an earlier run defined is not an unknown name. So after binding and
after each script the kernel tells the host the names its namespace gained and lost since it
last told, in the frame it sends anyway (`bound`, `done`): a set difference over the
namespace's keys, nothing when nothing changed. A bound tool still holding its own value is
not a script's name (the host knows it from the catalogue); a tool name the script reused is.
Names that cannot be written in code (not identifiers, keywords, dunders) are left out.
Past `MAX_NAMES` the kernel says only that there are too many to tell, so a script that
defines a million globals costs one flag, not a frame the host would refuse.
"""

from __future__ import annotations

import keyword
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .wire import NameChanges

MAX_NAMES = 5000
"""Names the kernel tells at most; past it, the host treats every name as possibly defined."""


class NameTeller:
    """What the host was last told of one namespace's names, and what changed since."""

    def __init__(self) -> None:
        self._told: set[str] = set()
        self._too_many = False

    def tell(self, namespace: dict[str, Any], bound: dict[str, Any], frame: NameChanges) -> None:
        """Put into `frame` what brings the host up to date: `names_new` and `names_gone`
        (lists of names), or `names_many` (True) past `MAX_NAMES`; nothing if nothing changed."""
        if len(namespace) > MAX_NAMES:
            if not self._too_many:
                self._too_many = True
                self._told = set()
                frame["names_many"] = True
            return
        missing = object()
        names = {
            name
            for name, value in namespace.items()
            if type(name) is str
            and bound.get(name, missing) is not value
            and name.isidentifier()
            and not (name.startswith("__") and name.endswith("__"))
            and not keyword.iskeyword(name)
        }
        if names == self._told and not self._too_many:
            return
        frame["names_new"] = sorted(names - self._told)
        frame["names_gone"] = sorted(self._told - names)
        if self._too_many:
            frame["names_many"] = False
            self._too_many = False
        self._told = names
