"""XML -> validated element tree: includes, replicate, attach, defaults and typed attributes.

Host-only. The output is an lxml tree in which every element knows its source file and line
(`_src` attribute), `<include>`, `<replicate>` and `<attach>` are expanded, and attribute
values are read through `Attrs`, which applies default classes and MuJoCo's built-in
defaults and checks each value against the MJCF schema (scripts/gen_schema.py).
"""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Mapping
from functools import lru_cache
from importlib import resources

import numpy as np
from lxml import etree

from jaxsim.mjcf.errors import MJCFError

SRC = "_src"  # private attribute: "file:line" of the element's origin


def _bool():
    return ["bool", None, 1, 1, None, [], None]


def _keyword(default: str, keys: list[str]):
    return ["enum", None, 1, 1, default, [], keys]


def _real(lo: int = 1, hi: int | None = 1):
    return ["double", None, lo, hi, None, [], None]


# MuJoCo 4.0 attributes that schema.json (generated from an older grammar file) lacks. The
# rendering and saving options are accepted (nothing physical); the physics jaxsim does not
# have is accepted by the grammar and refused by `_refuse_unsupported` unless it keeps
# MuJoCo's default, so the error says what is missing instead of "unrecognized".
_MUJOCO4_ATTRS = {
    "geom": {"castshadow": _bool()},
    "texture": {"embed": _keyword("auto", ["false", "true", "auto"])},
    "compiler": {"savecanonical": _bool(), "savecompiled": _bool(),
                 "passthrough": _keyword("none", ["none", "textures"])},
    "flag": {"ipc": _keyword("disable", ["disable", "enable"]),
             "speculative": _keyword("disable", ["disable", "enable"])},
    "joint": {"springyield": _real()},
    "fixed": {"springyield": _real()},
    "spatial": {"springyield": _real()},
    "default_tendon": {"springyield": _real()},
    "key": {"plastic": _real(0, None)},
    "insidesite": {"enclosed": _bool()},
}


@lru_cache(maxsize=1)
def schema() -> dict:
    text = resources.files("jaxsim.mjcf").joinpath("schema.json").read_text()
    sch = json.loads(text)
    for decl, attrs in _MUJOCO4_ATTRS.items():
        sch[decl]["attrs"].update(attrs)
    keys = sch["option"]["attrs"]["integrator"][6]
    if "discrete" not in keys:
        keys.append("discrete")
    return sch


def _refuse_unsupported(el, decl: str, name: str, text: str) -> None:
    """MuJoCo 4.0 physics that jaxsim does not simulate, named when a model asks for it (the
    flags ipc and speculative are refused with the other option flags, in compile.py)."""
    what = None
    if decl == "option" and name == "integrator" and text.strip() == "discrete":
        what = 'integrator="discrete" (MuJoCo 4.0\'s discrete integrator)'
    elif decl == "insidesite" and name == "enclosed" and text.strip() == "true":
        what = "the enclosure test of insidesite sensors (enclosed)"
    if what:
        raise MJCFError(f"{what} is not supported by jaxsim yet", el, name)


# Elements whose grammar is the body's (MuJoCo validates them against the body row).
_BODY_ALIASES = ("worldbody", "frame", "replicate")
# Actuator shortcut tags: defaults for these share one actuator record per class.
ACTUATOR_TAGS = ("general", "motor", "position", "velocity", "intvelocity", "orientation",
                 "pid", "damper", "cylinder", "muscle", "adhesion", "dcmotor")
# Kinds that default classes hold, by the XML tag used inside <default>.
DEFAULT_KIND = {t: "actuator" for t in ACTUATOR_TAGS}
DEFAULT_KIND.update({t: t for t in ("mesh", "material", "joint", "geom", "site", "camera",
                                    "light", "pair", "equality", "tendon")})


class Source:
    """Where files come from: a directory on disk and/or an in-memory asset dict."""

    def __init__(self, model_dir: str | None, assets: Mapping[str, bytes] | None = None):
        self.model_dir = model_dir or ""
        self.assets = dict(assets or {})

    def read(self, path: str, element=None, attribute: str = "file") -> bytes:
        for key in (path, os.path.normpath(path), os.path.basename(path)):
            if key in self.assets:
                data = self.assets[key]
                return data.encode() if isinstance(data, str) else bytes(data)
        full = path if os.path.isabs(path) else os.path.join(self.model_dir, path)
        try:
            with open(full, "rb") as fh:
                return fh.read()
        except OSError as e:
            raise MJCFError(f"cannot read file '{path}' ({e.strerror})", element, attribute) from None

    def display(self, path: str) -> str:
        return path if os.path.isabs(path) else os.path.join(self.model_dir, path)


# --------------------------------------------------------------------------------- reading


def _parse_bytes(data: bytes, filename: str) -> etree._Element:
    parser = etree.XMLParser(remove_comments=True, remove_pis=True, resolve_entities=False,
                             no_network=True, huge_tree=False)
    try:
        root = etree.fromstring(data, parser)
    except etree.XMLSyntaxError as e:
        raise MJCFError(f"malformed XML: {e.msg}", file=filename, line=e.lineno) from None
    except ValueError as e:  # e.g. unicode strings with an encoding declaration
        raise MJCFError(f"malformed XML: {e}", file=filename) from None
    if root is None:
        raise MJCFError("empty XML document", file=filename)
    for el in root.iter():
        if not isinstance(el.tag, str):  # entities and other non-elements
            raise MJCFError("unsupported XML node (entity or processing instruction)",
                            file=filename, line=el.sourceline)
        el.set(SRC, f"{filename}:{el.sourceline}")
    return root


def read_tree(data: bytes, filename: str, source: Source, _stack=()) -> etree._Element:
    """Parses a document and expands <include> recursively."""
    root = _parse_bytes(data, filename)
    for inc in list(root.iter("include")):
        fname = inc.get("file")
        if fname is None:
            raise MJCFError("missing required attribute", inc, "file")
        bad = set(inc.keys()) - {"file", "dir", SRC}
        if bad:
            raise MJCFError("unrecognized attribute", inc, sorted(bad)[0])
        if len(inc):
            raise MJCFError("<include> cannot have children", inc)
        if fname in _stack:
            raise MJCFError(f"recursive include of '{fname}'", inc, "file")
        sub = read_tree(source.read(fname, inc), source.display(fname), source, _stack + (fname,))
        parent = inc.getparent()
        if parent is None:
            raise MJCFError("<include> cannot be the root element", inc)
        idx = parent.index(inc)
        parent.remove(inc)
        # MuJoCo inserts the included document's top-level children in place of <include>.
        for i, child in enumerate(list(sub)):
            parent.insert(idx + i, child)
    return root


# ------------------------------------------------------------------------------ validation


def child_decl(parent_decl: str, tag: str) -> str | None:
    sch = schema()
    if parent_decl == "mujoco" and tag == "worldbody":
        return "worldbody"
    row = sch["body" if parent_decl in _BODY_ALIASES else parent_decl]
    return row["children"].get(tag)


def _check_value(el, name: str, spec, text: str) -> None:
    typ, _ns, lo, hi, _default, _flags, keys = spec
    toks = text.split()
    if typ in ("double", "float", "int"):
        if not toks and lo > 0:
            raise MJCFError("empty value", el, name)
        for t in toks:
            try:
                v = float(t) if typ != "int" else int(t)
            except ValueError:
                raise MJCFError(f"bad number '{t}'", el, name) from None
            if typ != "int" and np.isnan(v):
                raise MJCFError("NaN value", el, name)
        if len(toks) < lo or (hi is not None and len(toks) > hi):
            want = f"{lo}" if lo == hi else f"{lo} to {hi if hi is not None else 'any'}"
            raise MJCFError(f"expected {want} values, got {len(toks)}", el, name)
    elif typ == "bool":
        if text.strip() not in ("true", "false"):
            raise MJCFError(f"expected 'true' or 'false', got '{text}'", el, name)
    elif typ == "enum" and keys:
        if text.strip() not in keys:
            raise MJCFError(f"invalid keyword '{text}' (expected one of {', '.join(keys)})",
                            el, name)
    elif typ == "flags" and keys:
        for t in toks:
            if t not in keys:
                raise MJCFError(f"invalid keyword '{t}' (expected from {', '.join(keys)})",
                                el, name)
    elif typ == "chars":
        s = text.strip()
        if len(s) < lo or (hi is not None and len(s) > hi):
            raise MJCFError(f"expected {lo}..{hi} characters", el, name)


def validate(el, decl: str, in_default: bool = False) -> None:
    """Checks tags, attribute names and value syntax against the schema, recursively."""
    sch = schema()
    row = sch["body" if decl in _BODY_ALIASES and decl != "worldbody" else decl]
    attrs = row["attrs"]
    if decl == "replicate":
        attrs = sch["replicate"]["attrs"]
    if decl == "worldbody":
        attrs = {}
    for name, text in el.items():
        if name == SRC:
            continue
        if decl == "replicate" and name == "prefix":
            # accepted and ignored by MuJoCo (names are unaffected); nothing physical
            continue
        spec = attrs.get(name)
        if spec is None or (in_default and (name in ("name",) or "nodefault" in spec[5])):
            raise MJCFError("unrecognized attribute", el, name)
        _check_value(el, name, spec, text)
        _refuse_unsupported(el, decl, name, text)
    if not in_default:
        for name, spec in attrs.items():
            if "required" in spec[5] and el.get(name) is None and decl != "inertial":
                raise MJCFError("missing required attribute", el, name)
    for child in el:
        sub = child_decl(decl, child.tag)
        if sub is None:
            raise MJCFError(f"unrecognized element inside <{el.tag}>", child)
        validate(child, sub, in_default or decl == "default")


# ---------------------------------------------------------------------------- attributes


def _convert(spec, text: str):
    typ, _ns, lo, hi, _default, _flags, _keys = spec
    if typ in ("double", "float"):
        vals = [float(t) for t in text.split()]
        return vals[0] if (lo == hi == 1) else np.array(vals, dtype=np.float64)
    if typ == "int":
        vals = [int(t) for t in text.split()]
        return vals[0] if (lo == hi == 1) else np.array(vals, dtype=np.int64)
    if typ == "bool":
        return text.strip() == "true"
    if typ in ("enum",):
        return text.strip()
    if typ == "flags":
        return text.split()
    return text


def _default_value(spec):
    typ, _ns, lo, hi, default, _flags, _keys = spec
    if default is None:
        if typ in ("double", "float", "int"):
            n = hi if hi is not None else 0
            if lo == hi == 1:
                return 0.0 if typ != "int" else 0
            return np.zeros(n, dtype=np.float64 if typ != "int" else np.int64)
        if typ == "bool":
            return False
        return None
    if typ == "bool":
        return default == "true"
    if isinstance(default, list):
        arr = np.array(default, dtype=np.float64)
        if hi is not None and len(arr) < hi:
            arr = np.concatenate([arr, np.zeros(hi - len(arr))])
        return arr
    if typ in ("double", "float", "int") and not isinstance(default, str):
        if lo == hi == 1:
            return int(default) if typ == "int" else float(default)
        n = hi if hi is not None else 1
        arr = np.zeros(n)
        arr[0] = default
        return arr
    return default


class Attrs:
    """Typed, defaults-resolved attributes of one element.

    `a[name]` returns the value with MuJoCo's semantics for partially given vectors (the
    given values overwrite the leading entries of the default). `name in a` tells whether
    the attribute was given explicitly (on the element or by its default class).
    """

    def __init__(self, el, decl: str, given: dict[str, str],
                 chain: list[dict[str, str]] | None = None):
        self.el, self.decl = el, decl
        self.spec = schema()[decl]["attrs"] if decl not in _BODY_ALIASES else (
            schema()["body"]["attrs"] if decl != "replicate" else schema()["replicate"]["attrs"])
        self.given = given
        # the records that set attributes, in order (default classes, then the element):
        # a vector given partially overwrites only the leading entries of the value so far
        self.chain = chain if chain is not None else [given]

    def __contains__(self, name: str) -> bool:
        return name in self.given

    def raw(self, name: str, default=None):
        return self.given.get(name, default)

    def __getitem__(self, name: str):
        spec = self.spec.get(name)
        if spec is None:
            raise KeyError(f"{self.decl} has no attribute {name}")
        base = _default_value(spec)
        if name not in self.given:
            return copy.copy(base)
        val = base
        for rec in self.chain:
            if name not in rec:
                continue
            new = _convert(spec, rec[name])
            if isinstance(val, np.ndarray) and isinstance(new, np.ndarray) and len(new) < len(val):
                out = val.copy().astype(np.float64 if spec[0] != "int" else np.int64)
                out[: len(new)] = new
                val = out
            else:
                val = new
        return val

    def get(self, name: str, default):
        """The given value, or `default` (not the schema's) when absent."""
        return self[name] if name in self.given else default

    def error(self, message: str, attribute: str | None = None) -> MJCFError:
        return MJCFError(message, self.el, attribute)


class Defaults:
    """Default classes: per class, per kind, the ordered attribute records that apply."""

    def __init__(self, root):
        self.classes: dict[str, dict[str, list[tuple[str, dict]]]] = {}
        self.parent: dict[str, str | None] = {}
        self.elements: dict[str, object] = {}
        tops = [d for d in root if d.tag == "default"]
        self.classes["main"] = {}
        self.parent["main"] = None
        for top in tops:
            cls = top.get("class", "main")
            if cls != "main":
                # a top-level non-main class is a child of main
                self._add(top, "main")
            else:
                self._fill(top, "main")

    def _fill(self, node, cls: str) -> None:
        # the class's own element defaults first, then its nested classes, wherever they
        # stand among them (MuJoCo reads a <default> this way: a nested class inherits
        # values written after it)
        recs = self.classes[cls]
        for child in node:
            if child.tag != "default":
                kind = DEFAULT_KIND[child.tag]
                attrs = {k: v for k, v in child.items() if k != SRC}
                recs.setdefault(kind, []).append((child.tag, attrs))
        for child in node:
            if child.tag == "default":
                self._add(child, cls)

    def _add(self, node, parent: str) -> None:
        cls = node.get("class")
        if cls is None:
            raise MJCFError("nested <default> needs a class name", node, "class")
        if cls in self.classes:
            raise MJCFError(f"repeated default class '{cls}'", node, "class")
        self.parent[cls] = parent
        self.elements[cls] = node
        # start from a copy of the parent's records: child classes inherit
        self.classes[cls] = {k: list(v) for k, v in self.classes[parent].items()}
        self._fill(node, cls)

    def check_class(self, name: str, el, attribute: str) -> str:
        if name not in self.classes:
            raise MJCFError(f"unknown default class '{name}'", el, attribute)
        return name

    def records(self, cls: str, kind: str) -> list[tuple[str, dict]]:
        return self.classes[cls].get(kind, [])

    def merged(self, cls: str, kind: str) -> dict[str, str]:
        out: dict[str, str] = {}
        for _tag, attrs in self.records(cls, kind):
            out.update(attrs)
        return out


def element_attrs(el, decl: str, defaults: Defaults, cls: str, kind: str | None = None) -> Attrs:
    """Attributes of `el`: the default class's values for its kind, then the element's own."""
    own = {k: v for k, v in el.items() if k != SRC}
    if "class" in own:
        cls = defaults.check_class(own.pop("class"), el, "class")
    chain = ([attrs for _tag, attrs in defaults.records(cls, kind or DEFAULT_KIND.get(el.tag, el.tag))]
             if kind != "" else [])
    chain.append(own)
    given: dict[str, str] = {}
    for rec in chain:
        given.update(rec)
    return Attrs(el, decl, given, chain)
