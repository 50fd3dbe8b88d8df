"""Model composition expanded at the XML level: <replicate> (and, later, <attach>).

`<replicate count=N offset=... euler=... sep=...>` becomes N `<frame>`s holding renamed
copies of its children (MuJoCo appends sep + zero-padded index to every name inside).
Elements of the other sections that refer to a replicated object are, as in MuJoCo, moved
to the end of their section as one renamed copy per replica.
"""

from __future__ import annotations

import copy
import math
from functools import lru_cache

import numpy as np
from lxml import etree

from jaxsim.mjcf import spatial
from jaxsim.mjcf.errors import MJCFError
from jaxsim.mjcf.parse import SRC, schema

# sections whose elements may refer to objects inside a replicated subtree, in the order in
# which references can chain (an actuator on a tendon, a sensor on an actuator)
_SECTIONS = ("tendon", "equality", "actuator", "sensor", "contact", "custom")
_OBJ_NS = {"body", "joint", "geom", "site", "tendon", "actuator", "camera", "light", "frame"}


@lru_cache(maxsize=1)
def _ref_attrs() -> frozenset:
    names = {"objname", "refname", "jointinparent"}
    for row in schema().values():
        for attr, spec in row["attrs"].items():
            if spec[0] == "ref" and spec[1] in _OBJ_NS:
                names.add(attr)
    names.discard("name")
    return frozenset(names)


def _suffix(sep: str, count: int, i: int) -> str:
    return sep + str(i).zfill(len(str(count)))


def _rename(el, inside: set, suffix: str) -> None:
    refs = _ref_attrs()
    for e in el.iter():
        name = e.get("name")
        if name and name in inside:
            e.set("name", name + suffix)
        for attr in refs:
            v = e.get(attr)
            if v is not None and v in inside:
                e.set(attr, v + suffix)


def _refers(el, inside: set) -> bool:
    refs = _ref_attrs()
    return any(e.get(a) in inside for e in el.iter() for a in refs if e.get(a) is not None)


def _fmt(v) -> str:
    return " ".join(repr(float(x)) for x in np.ravel(v))


def expand_replicate(root, rep, compiler) -> None:
    count = rep.get("count")
    try:
        count = int(count)
    except (TypeError, ValueError):
        raise MJCFError("replicate needs an integer 'count'", rep, "count") from None
    if count < 1:
        raise MJCFError("replicate count must be positive", rep, "count")
    offset = np.array([float(x) for x in rep.get("offset", "0 0 0").split()])
    euler = np.array([float(x) for x in rep.get("euler", "0 0 0").split()])
    if offset.size != 3 or euler.size != 3:
        raise MJCFError("offset and euler need 3 values", rep)
    sep = rep.get("sep", "")
    unit = math.pi / 180.0 if compiler.degree else 1.0
    for child in rep:
        if child.tag in ("freejoint", "flexcomp"):
            raise MJCFError(f"<{child.tag}> is not allowed inside <replicate>", child)
    inside = {e.get("name") for e in rep.iter() if e is not rep and e.get("name")}
    parent = rep.getparent()
    idx = parent.index(rep)
    pos = np.zeros(3)
    frames = []
    for i in range(count):
        quat = spatial.euler2quat(euler * i * unit, compiler.eulerseq)
        frame = etree.Element("frame")
        frame.set(SRC, rep.get(SRC, ""))
        frame.set("pos", _fmt(pos))
        frame.set("quat", _fmt(quat))
        if rep.get("childclass"):
            frame.set("childclass", rep.get("childclass"))
        suffix = _suffix(sep, count, i)
        for child in rep:
            c = copy.deepcopy(child)
            _rename(c, inside, suffix)
            frame.append(c)
        frames.append(frame)
        # accumulate the offset in the rotated frame of this replica
        pos = pos + spatial.rotvec(quat, offset)
    parent.remove(rep)
    for k, f in enumerate(frames):
        parent.insert(idx + k, f)
    _replicate_references(root, inside, [_suffix(sep, count, i) for i in range(count)])


def _replicate_references(root, inside: set, suffixes: list[str]) -> None:
    inside = set(inside)
    for tag in _SECTIONS:
        for section in list(root.iterchildren(tag)):
            moved = [el for el in section if _refers(el, inside)]
            if not moved:
                continue
            for el in moved:
                section.remove(el)
            names = {e.get("name") for el in moved for e in el.iter() if e.get("name")}
            for suffix in suffixes:
                for el in moved:
                    c = copy.deepcopy(el)
                    _rename(c, inside | names, suffix)
                    section.append(c)
            inside |= names


def expand_all(root, compiler, source) -> None:
    """Expands every <replicate> (innermost first), then every <attach> in document order."""
    def depth(e):
        d = 0
        while e.getparent() is not None:
            e, d = e.getparent(), d + 1
        return d

    from jaxsim.mjcf.attach import expand_attach  # attach.py imports this module

    # MuJoCo reads an <attach> inside a <replicate> before replicating its subtree (the
    # copies then get the replicate's suffix); otherwise replicates are expanded first
    nested = any(any(a.tag == "replicate" for a in att.iterancestors())
                 for att in root.iter("attach"))
    finish = expand_attach(root, compiler, source, defer_keys=True) if nested else None
    reps = sorted(root.iter("replicate"), key=depth, reverse=True)
    for rep in reps:
        expand_replicate(root, rep, compiler)
    if finish is not None:  # the attached keyframes, over the replicated joints
        finish()
    if not nested:
        expand_attach(root, compiler, source)
