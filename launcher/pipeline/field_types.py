"""What a settings dataclass's annotations allow, so that parsing reads each setting's type from its one
declaration instead of parallel tables of names."""

from __future__ import annotations

import types
import typing
from dataclasses import fields
from functools import cache
from typing import Any


@cache
def field_types(cls: type) -> dict[str, frozenset[Any]]:
    """Field name → the outer types its annotation allows: `int | None` → {int, NoneType},
    `tuple[str, ...]` → {tuple}, `bool | Literal["auto"]` → {bool, Literal}."""
    hints = typing.get_type_hints(cls)
    out = {}
    for f in fields(cls):
        hint = hints[f.name]
        union = isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union
        options = typing.get_args(hint) if union else (hint,)
        out[f.name] = frozenset(typing.get_origin(o) or o for o in options)
    return out


def fields_allowing(cls: type, kind: Any) -> frozenset[str]:
    """The fields of `cls` whose annotation allows `kind` (int, str, type(None), tuple, typing.Literal, …)."""
    return frozenset(name for name, kinds in field_types(cls).items() if kind in kinds)
