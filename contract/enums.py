"""NameEnum: an enum of names, each member the string it stands for (a CLI choice, a JSON
value), so that it compares, hashes, prints and formats as that string."""

from __future__ import annotations

from enum import Enum


class NameEnum(str, Enum):
    """A str-valued enum whose members print and format as their values (Python 3.11's
    StrEnum, for the Pythons before it)."""

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return format(str(self.value), spec)
