"""Shared helpers of the section passes: MuJoCo-style records built from default classes.

MuJoCo builds each tendon, actuator, equality and pair from a *record*: the built-in
defaults (`mjs_default*`), modified in turn by every matching element of the element's
default-class chain (main first), then by the element itself. Vector attributes given with
fewer values than their length overwrite only the leading entries and keep the rest of the
record, so the chain has to be replayed element by element; merging attribute strings by
name (as `Attrs` does) would lose the inherited tail of a partially given vector.
"""

from __future__ import annotations

import copy

import numpy as np

from jaxsim.mjcf.errors import MJCFError
from jaxsim.mjcf.parse import SRC, schema

# mjtLimited
LIMITED = {"false": 0, "true": 1, "auto": 2}
SOLREF = (0.02, 1.0)
SOLIMP = (0.9, 0.95, 0.001, 0.5, 2.0)


def own_attrs(el) -> dict[str, str]:
    """The attributes written on `el` itself (no class defaults)."""
    return {k: v for k, v in el.items() if k != SRC}


def element_class(ctx, el) -> str:
    """The default class an element of a top-level section uses ('main' unless given)."""
    cls = el.get("class")
    if cls is None:
        return "main"
    return ctx.defaults.check_class(cls, el, "class")


def chain(ctx, el, kind: str) -> list[tuple[str, dict]]:
    """The (tag, attrs) records of `el`'s default-class chain for `kind`, main first."""
    return ctx.defaults.records(element_class(ctx, el), kind)


def read_into(rec: dict, attrs: dict, decl: str, names=None, el=None) -> None:
    """Writes the given attributes into `rec` with MuJoCo's read semantics.

    Args:
      rec: the record (attribute name -> current value).
      attrs: attribute strings to apply.
      decl: schema declaration giving each attribute's type.
      names: if given, only these attribute names are read.
      el: element for error messages.
    """
    spec = schema()[decl]["attrs"]
    for name, text in attrs.items():
        if names is not None and name not in names:
            continue
        s = spec.get(name)
        if s is None:
            continue
        typ, _ns, lo, hi = s[0], s[1], s[2], s[3]
        toks = text.split()
        if typ in ("double", "float"):
            try:
                vals = [float(t) for t in toks]
            except ValueError:
                raise MJCFError(f"bad number in '{text}'", el, name) from None
            cur = rec.get(name)
            if hi is None:  # variable-length vector (user data): replaced as a whole
                rec[name] = np.array(vals, dtype=np.float64)
            elif isinstance(cur, np.ndarray):
                new = cur.astype(np.float64).copy()
                new[: len(vals)] = vals[: len(new)]
                rec[name] = new
            else:
                rec[name] = vals[0] if vals else 0.0
        elif typ == "int":
            rec[name] = int(toks[0]) if (lo == hi == 1) else np.array([int(t) for t in toks])
        elif typ == "bool":
            rec[name] = text.strip() == "true"
        elif typ == "flags":
            rec[name] = toks
        else:
            rec[name] = text.strip()


def fresh(defaults: dict) -> dict:
    """A deep copy of a record template."""
    return {k: copy.deepcopy(v) for k, v in defaults.items()}


def nuser(ctx, key: str, rows: list, els: list) -> np.ndarray:
    """Pads user data to `nuser_*` (or the longest row when it is -1) as MuJoCo does."""
    n = ctx.out.get(key, -1)
    if n is None or n < 0:
        n = max((len(r) for r in rows), default=0)
    for r, el in zip(rows, els, strict=True):
        if len(r) > n:
            raise MJCFError(f"user has more values than {key}", el, "user")
    ctx.out[key] = int(n)
    out = np.zeros((len(rows), n))
    for i, r in enumerate(rows):
        out[i, : len(r)] = r
    return out


def check_limited(el, autolimits: bool, what: str, attr: str, limited: int, rng) -> None:
    """MuJoCo's checklimited: a range with limited='auto' needs compiler autolimits."""
    if limited == LIMITED["auto"] and not autolimits and not (rng[0] == 0 and rng[1] == 0):
        lim = f"{attr}limited" if attr != "actuatorfrc" else "actuatorfrclimited"
        raise MJCFError(f"{what} has `{attr}range` but not `{lim}`; set the autolimits=\"true\" "
                        f"compiler option, specify `{lim}` explicitly (\"true\" or \"false\"), "
                        f"or remove the `{attr}range` attribute", el, f"{attr}range")


def is_limited(limited: int, rng) -> bool:
    """MuJoCo's islimited: true, or auto with a non-empty range."""
    return limited == LIMITED["true"] or (limited == LIMITED["auto"] and rng[0] < rng[1])


def sections(ctx, tag: str):
    """Children of every `<tag>` section, in document order."""
    for sec in ctx.root.iterchildren(tag):
        for el in sec:
            if isinstance(el.tag, str):
                yield el


def ints(n: int, shape=None, fill: int = 0) -> np.ndarray:
    return np.full(shape if shape is not None else (n,), fill, dtype=np.int64)
