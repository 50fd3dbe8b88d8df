"""The one pytree base class used by Option, Model, State and Contact.

A field declared with `leaf(...)` is a pytree leaf: a `jax.Array` that `jit`, `vmap` and
`grad` reach (masses, gains, positions, ...). A field declared with `static(...)` is part
of the tree structure: integer structure (types, ids, addresses) held as read-only numpy
arrays, Python ints or tuples. Static fields are hashed once, when the object is built, so
`jax.jit` looks a model's structure up in its cache at the cost of one hash comparison.

Every field carries its shape (in MuJoCo's size names, e.g. "(nbody, 3)") and a one-line
description; `tests/test_types.py` checks both are present and that the leaf/static split
matches the values.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

import jax
import numpy as np


def leaf(shape: str, doc: str, default: Any = dataclasses.MISSING) -> Any:
    """Declares a differentiable / batchable field (a pytree leaf)."""
    kw = {} if default is dataclasses.MISSING else {"default": default}
    return dataclasses.field(metadata={"static": False, "shape": shape, "doc": doc}, **kw)


def static(shape: str, doc: str, default: Any = dataclasses.MISSING) -> Any:
    """Declares a structural field (part of the pytree's static structure)."""
    kw = {} if default is dataclasses.MISSING else {"default": default}
    return dataclasses.field(metadata={"static": True, "shape": shape, "doc": doc}, **kw)


def shape_of(spec: str, sizes: dict) -> tuple[int, ...]:
    """Evaluates a field's shape string, e.g. "(nbody, 3)", with the model's sizes."""
    spec = spec.strip()
    if spec in ("()", "-"):
        return ()
    dims = [d.strip() for d in spec.strip("()").split(",") if d.strip()]
    # the strings are our own field declarations, not user input
    return tuple(int(eval(d, {"__builtins__": {}}, dict(sizes))) for d in dims)  # noqa: S307


def _freeze(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        value = value.copy()
        value.flags.writeable = False
    return value


def _hash_part(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return (value.dtype.str, value.shape, value.tobytes())
    if isinstance(value, (list, tuple)):
        return tuple(_hash_part(v) for v in value)
    return value


class _StaticKey:
    """Hashable, comparable bundle of a struct's static fields (the pytree aux data)."""

    __slots__ = ("values", "_hash", "_key")

    def __init__(self, values: tuple):
        self.values = values
        self._key = tuple(_hash_part(v) for v in values)
        self._hash = hash(self._key)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, _StaticKey):
            return NotImplemented
        return self is other or (self._hash == other._hash and self._key == other._key)


class Struct:
    """Base class: frozen dataclass, pytree with static/leaf split, `.replace`."""

    _leaf_names: ClassVar[tuple[str, ...]] = ()
    _static_names: ClassVar[tuple[str, ...]] = ()

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        dataclasses.dataclass(frozen=True, eq=False, repr=False)(cls)
        fields = dataclasses.fields(cls)
        cls._leaf_names = tuple(f.name for f in fields if not f.metadata.get("static", False))
        cls._static_names = tuple(f.name for f in fields if f.metadata.get("static", False))
        jax.tree_util.register_pytree_with_keys(
            cls, cls._flatten_with_keys, cls._unflatten, cls._flatten
        )

    def __post_init__(self):
        for name in self._static_names:
            object.__setattr__(self, name, _freeze(getattr(self, name)))
        object.__setattr__(
            self, "_static_key", _StaticKey(tuple(getattr(self, n) for n in self._static_names))
        )

    def _flatten(self):
        return tuple(getattr(self, n) for n in self._leaf_names), self._static_key

    def _flatten_with_keys(self):
        leaves = tuple(
            (jax.tree_util.GetAttrKey(n), getattr(self, n)) for n in self._leaf_names
        )
        return leaves, self._static_key

    @classmethod
    def _unflatten(cls, key: _StaticKey, leaves):
        obj = object.__new__(cls)
        for n, v in zip(cls._leaf_names, leaves, strict=True):
            object.__setattr__(obj, n, v)
        for n, v in zip(cls._static_names, key.values, strict=True):
            object.__setattr__(obj, n, v)
        object.__setattr__(obj, "_static_key", key)
        return obj

    def replace(self, **changes: Any):
        """Returns a copy with the given fields replaced (static fields rehash)."""
        bad = set(changes) - set(self._leaf_names) - set(self._static_names)
        if bad:
            raise AttributeError(f"{type(self).__name__} has no field(s) {sorted(bad)}")
        if any(n in self._static_names for n in changes):
            return dataclasses.replace(self, **changes)
        obj = object.__new__(type(self))
        for n in self._leaf_names:
            object.__setattr__(obj, n, changes.get(n, getattr(self, n)))
        for n in self._static_names:
            object.__setattr__(obj, n, getattr(self, n))
        object.__setattr__(obj, "_static_key", self._static_key)
        return obj

    def __repr__(self) -> str:
        parts = []
        for n in self._static_names + self._leaf_names:
            v = getattr(self, n)
            if hasattr(v, "shape") and hasattr(v, "dtype"):
                parts.append(f"{n}={v.dtype}{list(v.shape)}")
            elif isinstance(v, Struct):
                parts.append(f"{n}={type(v).__name__}(...)")
            elif isinstance(v, tuple) and len(v) > 4:
                parts.append(f"{n}=<{len(v)} items>")
            else:
                parts.append(f"{n}={v!r}")
        return f"{type(self).__name__}({', '.join(parts)})"

    @classmethod
    def field_info(cls) -> dict[str, dict]:
        """Name -> {static, shape, doc} for every field."""
        return {f.name: dict(f.metadata) for f in dataclasses.fields(cls)}
