"""Model composition at the XML level: `<asset><model>` + `<attach>` (and self-attach).

MuJoCo parses a child model into its own spec, resolving every element's attributes against
the child's default classes and compiler settings, and then copies the attached subtree into
the parent with `prefix` prepended to every name and reference. This module reproduces the
result as a rewritten parent tree that the rest of the compiler reads as if it were written
by hand:

* the copied subtree replaces the `<attach>` element (MuJoCo parses the world body last and
  attaches in document order, so body and element order follow the document);
* the child's default classes become a prefixed class tree (the child's main class is
  `prefix + "main"`); every copied element names its class explicitly, so no class of the
  parent leaks into it (when the parent's main class sets anything, the parent's own
  elements are moved into a class of their own for the same reason);
* the child's assets and the elements of other sections whose (prefixed) references all
  resolve after the attach are appended to the parent's sections (MuJoCo's CopyList);
* the child's keyframes become parent keyframes named `prefix + name`, holding the child's
  values for the attached joints/actuators and qpos0/zeros elsewhere;
* `<option>`/`<size>`/`<visual>` conflicts follow `<compiler conflict=...>`.
"""

from __future__ import annotations

import copy
import os

import numpy as np
from lxml import etree

from jaxsim.mjcf import spatial
from jaxsim.mjcf.errors import MJCFError
from jaxsim.mjcf.parse import (
    ACTUATOR_TAGS,
    SRC,
    Defaults,
    Source,
    element_attrs,
    read_tree,
    schema,
    validate,
)

# class name for the parent's main defaults once they are isolated from attached classes
_PARENT_MAIN = "__jaxsim_parent_main__"
_TREE_KINDS = ("joint", "geom", "site", "camera", "light")
_ASSET_REFS = frozenset({"material", "mesh", "hfield", "texture"})
_FILE_ATTRS = ("file", "fileright", "fileleft", "fileup", "filedown", "filefront", "fileback")
# MuJoCo's CopyList order: (section, tags or None for all, copied on self-attach)
_COPY_ORDER = (
    ("asset", ("mesh", "skin", "hfield", "texture", "material"), False),
    ("custom", ("numeric", "text"), False),
    ("contact", ("pair",), True), ("contact", ("exclude",), True),
    ("tendon", None, True), ("equality", None, True), ("actuator", None, True),
    ("sensor", None, True), ("custom", ("tuple",), True),
)
_JK, _AK = "_attach_jnt", "_attach_act"  # private markers for keyframe bookkeeping


def _ref_attrs() -> frozenset:
    names = {"objname", "refname", "jointinparent"}
    for row in schema().values():
        for attr, spec in row["attrs"].items():
            if spec[0] == "ref" and spec[1] not in ("default", "model", "instance"):
                names.add(attr)
    return frozenset(names)


_REFS = _ref_attrs()


# ------------------------------------------------------------------------------ classes


def _bind_tree(el, cls: str) -> None:
    """Gives every defaultable tree element its effective class explicitly."""
    for c in el:
        if c.tag in ("body", "frame"):
            _bind_tree(c, c.get("childclass") or cls)
        elif c.tag in _TREE_KINDS and c.get("class") is None:
            c.set("class", cls)


def _section_defaultables(root):
    for sec in root.iterchildren("asset"):
        yield from (e for e in sec if e.tag in ("mesh", "material"))
    for tag in ("tendon", "equality"):
        for sec in root.iterchildren(tag):
            yield from (e for e in sec if isinstance(e.tag, str))
    for sec in root.iterchildren("actuator"):
        yield from (e for e in sec if e.tag in ACTUATOR_TAGS)
    for sec in root.iterchildren("contact"):
        yield from (e for e in sec if e.tag == "pair")


def _bind_classes(root, rename) -> None:
    """Makes every element's class explicit, then renames class references by `rename`."""
    for wb in root.iterchildren("worldbody"):
        _bind_tree(wb, "main")
    for el in _section_defaultables(root):
        if el.get("class") is None:
            el.set("class", "main")
    for el in root.iter():
        if el.tag == "default":
            continue
        for attr in ("class", "childclass"):
            v = el.get(attr)
            if v is not None:
                el.set(attr, rename(v))


def _isolate_parent_main(root) -> None:
    """Moves the parent's main defaults into a class of their own (see module docstring)."""
    tops = list(root.iterchildren("default"))
    mains = [d for d in tops if d.get("class", "main") == "main"]
    if not any(c.tag != "default" for d in mains for c in d):
        return
    _bind_classes(root, lambda v: _PARENT_MAIN if v == "main" else v)
    holder = etree.Element("default")
    holder.set(SRC, tops[0].get(SRC, ""))
    inner = etree.SubElement(holder, "default")
    inner.set("class", _PARENT_MAIN)
    inner.set(SRC, tops[0].get(SRC, ""))
    for top in tops:
        if top.get("class", "main") == "main":
            for c in list(top):
                inner.append(c)
        else:
            inner.append(top)
        if top.getparent() is not None:
            top.getparent().remove(top)
    root.insert(0, holder)


def _child_defaults(croot, prefix: str):
    """The child's default tree as one class `prefix + 'main'` with prefixed subclasses."""
    out = etree.Element("default")
    out.set("class", prefix + "main")
    for top in list(croot.iterchildren("default")):
        out.set(SRC, top.get(SRC, ""))
        if top.get("class", "main") == "main":
            for c in list(top):
                out.append(c)
        else:
            out.append(top)
    for d in out.iter("default"):
        if d is not out:
            d.set("class", prefix + d.get("class", ""))
    return out


# ------------------------------------------------------------------------------- names


def _stem(path: str) -> str:
    base = os.path.basename(path.replace("\\", "/"))
    return base.rsplit(".", 1)[0] if "." in base else base


def _prefix_all(el, prefix: str, assets: bool = True) -> None:
    """Prepends `prefix` to every name and reference inside `el` (MuJoCo's NameSpace)."""
    for e in el.iter():
        if not isinstance(e.tag, str):
            continue
        if e.tag in ("mesh", "hfield", "texture", "skin") and not e.get("name") and e.get("file"):
            e.set("name", _stem(e.get("file")))  # MuJoCo names unnamed file assets by file
        name = e.get("name")
        if name and e.tag != "mujoco":
            e.set("name", prefix + name)
        for attr in _REFS:
            v = e.get(attr)
            if not v or (not assets and attr in _ASSET_REFS):
                continue
            e.set(attr, prefix + v)


def _all_names(root) -> set:
    names = {"world"}
    for e in root.iter():
        if isinstance(e.tag, str) and e.get("name"):
            names.add(e.get("name"))
    return names


def _refs_resolve(el, names: set) -> bool:
    for e in el.iter():
        for attr in _REFS:
            v = e.get(attr)
            if v and v not in names:
                return False
    return True


def _section(root, tag: str):
    secs = list(root.iterchildren(tag))
    if secs:
        return secs[-1]
    sec = etree.SubElement(root, tag)
    sec.set(SRC, root.get(SRC, ""))
    return sec


def _copy_sections(root, croot, names: set, self_attach: bool, prefix: str) -> None:
    """Appends the child's elements whose references resolve (MuJoCo's CopyList)."""
    for tag, tags, on_self in _COPY_ORDER:
        if self_attach and not on_self:
            continue
        for sec in list(croot.iterchildren(tag)):
            for el in list(sec):
                if not isinstance(el.tag, str) or (tags is not None and el.tag not in tags):
                    continue
                c = copy.deepcopy(el)
                if self_attach:
                    _prefix_all(c, prefix, assets=False)
                if not _refs_resolve(c, names):
                    continue
                _section(root, tag).append(c)
                if c.get("name"):
                    names.add(c.get("name"))


# --------------------------------------------------------------------------- compilers


def _convert_units(croot, ccomp, pcomp) -> None:
    """Rewrites the child's angles so that the parent's compiler settings read them alike."""
    if ccomp.degree == pcomp.degree and ccomp.eulerseq == pcomp.eulerseq:
        return
    unit = np.pi / 180.0 if ccomp.degree else 1.0
    for wb in croot.iterchildren("worldbody"):
        for e in wb.iter():
            if e.get("euler") is not None:
                v = [float(x) * unit for x in e.get("euler").split()]
                q = spatial.euler2quat(v, ccomp.eulerseq)
                del e.attrib["euler"]
                e.set("quat", " ".join(repr(float(x)) for x in q))
            if e.get("axisangle") is not None and ccomp.degree != pcomp.degree:
                v = [float(x) for x in e.get("axisangle").split()]
                q = spatial.axisangle2quat(v[:3], v[3] * unit)
                del e.attrib["axisangle"]
                e.set("quat", " ".join(repr(float(x)) for x in q))
    if ccomp.degree == pcomp.degree:
        return
    scale = (np.pi / 180.0) if ccomp.degree else (180.0 / np.pi)
    defaults = Defaults(croot)
    for wb in croot.iterchildren("worldbody"):
        for e in wb.iter("joint"):
            a = element_attrs(e, "joint", defaults, e.get("class", "main"))
            if a["type"] not in ("hinge", "ball"):
                continue
            for attr in ("range", "ref", "springref"):
                if attr in a:
                    v = np.atleast_1d(a[attr]) * scale
                    e.set(attr, " ".join(repr(float(x)) for x in v))


def _fix_files(croot, ccomp, child_dir: str, source: Source) -> None:
    """Makes the child's asset file names resolve from the parent's directory."""
    for sec in croot.iterchildren("asset"):
        for e in sec:
            if not isinstance(e.tag, str):
                continue
            sub = ccomp.texturedir if e.tag == "texture" else ccomp.meshdir
            for attr in _FILE_ATTRS:
                f = e.get(attr)
                if not f or os.path.isabs(f) or f in source.assets:
                    continue
                path = os.path.join(child_dir, sub or "", f)
                if source.model_dir:
                    path = os.path.normpath(os.path.join(source.model_dir, path))
                e.set(attr, path)


# ------------------------------------------------------------------------------ options

_OPT_MIN = ("timestep", "tolerance", "ls_tolerance", "noslip_tolerance", "ccd_tolerance",
            "sleep_tolerance")
_OPT_MAX = ("iterations", "ls_iterations", "noslip_iterations", "ccd_iterations",
            "sdf_iterations", "sdf_initpoints")
_OPT_FIXED = ("impratio", "density", "viscosity", "o_margin", "integrator", "cone", "jacobian",
              "solver")
_OPT_ARRAYS = ("gravity", "wind", "magnetic", "o_solref", "o_solimp", "o_friction")
_ENUMS = {"integrator": ("Euler", "RK4", "implicit", "implicitfast"),
          "cone": ("pyramidal", "elliptic"), "jacobian": ("dense", "sparse", "auto"),
          "solver": ("PGS", "CG", "Newton")}
_SIZE_MAX = ("memory", "njmax", "nconmax", "nuserdata", "nkey", "nuser_body", "nuser_jnt",
             "nuser_geom", "nuser_site", "nuser_cam", "nuser_tendon", "nuser_actuator",
             "nuser_sensor")


def _flag_names():
    from jaxsim.types import DisableBit, EnableBit

    return ([(k.lower(), int(v)) for k, v in DisableBit.__members__.items()],
            [(k.lower(), int(v)) for k, v in EnableBit.__members__.items()])


class _Globals:
    """Option/size/visual values of one model with MuJoCo's 'authored' marks."""

    def __init__(self, root):
        sch = schema()
        self.val, self.auth = {}, set()
        self.bits = {"disable": 0, "enable": 0, "actdisable": 0}
        self.bauth = {"disable": 0, "enable": 0, "actdisable": 0}
        ospec = sch["option"]["attrs"]
        for k in _OPT_MIN + _OPT_MAX + _OPT_FIXED + _OPT_ARRAYS:
            d = ospec[k][4]
            d = 0 if d is None else d
            if k in _ENUMS:
                d = _ENUMS[k].index(d)
            elif k in _OPT_MAX:
                d = int(d)
            self.val[k] = np.asarray(d, float) if k in _OPT_ARRAYS else d
        disable, enable = _flag_names()
        for el in root.iterchildren("option"):
            for k, v in el.items():
                if k in self.val:
                    if k in _ENUMS:
                        self.val[k] = _ENUMS[k].index(v.strip())
                    elif k in _OPT_ARRAYS:
                        self.val[k] = np.array([float(x) for x in v.split()])
                    else:
                        self.val[k] = (int(v) if k in _OPT_MAX else float(v))
                    self.auth.add(k)
                elif k == "actuatorgroupdisable":
                    for g in v.split():
                        self.bits["actdisable"] |= 1 << int(g)
                        self.bauth["actdisable"] |= 1 << int(g)
            for fl in el.iterchildren("flag"):
                for k, v in fl.items():
                    for kind, table in (("disable", disable), ("enable", enable)):
                        bit = dict(table).get(k)
                        if bit is None:
                            continue
                        on = (v == "disable") if kind == "disable" else (v == "enable")
                        self.bits[kind] = (self.bits[kind] | bit) if on else (self.bits[kind] & ~bit)
                        self.bauth[kind] |= bit
        for k in _SIZE_MAX:
            self.val[k] = 0 if k in ("nkey", "nuserdata") else -1
        for el in root.iterchildren("size"):
            for k, v in el.items():
                if k in _SIZE_MAX:
                    self.val[k] = _memory(v) if k == "memory" else int(v)
        self.val["znear"] = 0.01
        for vis in root.iterchildren("visual"):
            for m in vis.iterchildren("map"):
                if m.get("znear") is not None:
                    self.val["znear"] = float(m.get("znear"))
                    self.auth.add("znear")


def _memory(text: str) -> int:
    t = text.strip()
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    if t and t[-1] in mult:
        return int(float(t[:-1]) * mult[t[-1]])
    return int(t)


def _fmt(v) -> str:
    if isinstance(v, np.ndarray):
        return " ".join(f"{x:g}" for x in v)
    return f"{v:g}" if isinstance(v, float) else str(v)


def _resolve_conflicts(att, parent: _Globals, child: _Globals, mode: str, pname: str,
                       cname: str, defaults: _Globals) -> list[str]:
    """MuJoCo's attach conflict resolver; returns the names of the values it changed."""
    errs, ops = [], []
    pdef = defaults

    def scalar(k, merge):
        pv, cv = parent.val[k], child.val[k]
        equal = np.array_equal(pv, cv) if isinstance(pv, np.ndarray) else pv == cv
        if equal:
            return
        pa, ca = k in parent.auth, k in child.auth
        if not pa and not ca:
            dv = pdef.val[k]
            differs = (lambda v: not np.array_equal(v, dv)) if isinstance(pv, np.ndarray) else (
                lambda v: v != dv)
            pa, ca = differs(pv), differs(cv)
        if not ca:
            return
        msg = f"{k}: parent has {_fmt(pv)}{'' if pa else ' (default)'}, child has {_fmt(cv)}"
        if not pa:
            if mode == "merge":
                ops.append((k, cv))
            return
        if mode == "merge" and merge is not None:
            ops.append((k, min(pv, cv) if merge == "min" else max(pv, cv)))
        elif mode in ("merge", "error"):
            errs.append(msg)

    for k in _OPT_MIN:
        scalar(k, "min")
    for k in _OPT_MAX:
        scalar(k, "max")
    for k in _OPT_FIXED + _OPT_ARRAYS:
        scalar(k, None)
    disable, enable = _flag_names()
    for kind, table in (("disable", disable), ("enable", enable), ("actdisable", None)):
        pauth, cauth = parent.bauth[kind], child.bauth[kind]
        if not pauth and not cauth:
            pauth = cauth = ~0
        cset = child.bits[kind] & cauth
        if not cset:
            continue
        if mode == "merge":
            ops.append(("bits:" + kind, parent.bits[kind] | cset))
            continue
        diff = (parent.bits[kind] ^ child.bits[kind]) & pauth & cauth
        if diff and mode == "error":
            for name, bit in (table or [(f"group {i}", 1 << i) for i in range(31)]):
                if diff & bit:
                    s = "set" if parent.bits[kind] & bit else "unset"
                    t = "unset" if s == "set" else "set"
                    errs.append(f"flag '{name.capitalize()}': parent {s}, child {t}")
    scalar("znear", "min")
    for k in _SIZE_MAX:
        pv, cv = parent.val[k], child.val[k]
        if pv == cv or cv == pdef.val[k]:
            continue
        if pv == pdef.val[k]:
            if mode == "merge":
                ops.append((k, cv))
        elif mode == "merge":
            ops.append((k, max(pv, cv)))
        elif mode == "error":
            errs.append(f"{k}: parent has {pv}, child has {cv}")
    if errs:
        has_p = pname not in ("", "MuJoCo Model")
        has_c = cname not in ("", "MuJoCo Model")
        if has_p and has_c:
            head = f"Attach conflict when attaching '{cname}' to '{pname}'"
        elif has_c:
            head = f"Attach conflict when attaching '{cname}'"
        elif has_p:
            head = f"Attach conflict when attaching to '{pname}'"
        else:
            head = "Attach conflict on attach"
        raise MJCFError("\n".join([f"{head}, policy is '{mode}'"] + errs), att)
    changed = []
    for k, v in ops:
        if k.startswith("bits:"):
            parent.bits[k[5:]] = v
        else:
            parent.val[k] = v
        changed.append(k)
    return changed


def _write_globals(root, g: _Globals, changed: set) -> None:
    """Writes merged values onto the parent's <option>/<size>/<visual> elements."""
    if not changed:
        return
    opts = list(root.iterchildren("option"))
    opt = opts[-1] if opts else etree.SubElement(root, "option")
    disable, enable = _flag_names()
    flag = None
    for k in sorted(changed):
        if k in _ENUMS:
            opt.set(k, _ENUMS[k][int(g.val[k])])
        elif k in _OPT_ARRAYS:
            opt.set(k, " ".join(repr(float(x)) for x in g.val[k]))
        elif k in _OPT_MIN + _OPT_MAX + _OPT_FIXED:
            opt.set(k, repr(g.val[k]))
        elif k in _SIZE_MAX:
            sizes = list(root.iterchildren("size"))
            (sizes[-1] if sizes else etree.SubElement(root, "size")).set(k, str(g.val[k]))
        elif k == "znear":
            vis = list(root.iterchildren("visual"))
            vis = vis[-1] if vis else etree.SubElement(root, "visual")
            maps = list(vis.iterchildren("map"))
            (maps[-1] if maps else etree.SubElement(vis, "map")).set("znear", repr(g.val[k]))
        elif k in ("bits:disable", "bits:enable"):
            flag = flag if flag is not None else etree.SubElement(opt, "flag")
            kind = k[5:]
            for name, bit in (disable if kind == "disable" else enable):
                on = bool(g.bits[kind] & bit)
                if kind == "disable":
                    flag.set(name, "disable" if on else "enable")
                else:
                    flag.set(name, "enable" if on else "disable")
        elif k == "bits:actdisable":
            groups = [str(i) for i in range(31) if g.bits["actdisable"] & (1 << i)]
            opt.set("actuatorgroupdisable", " ".join(groups))


# ---------------------------------------------------------------------------- keyframes

_WIDTH = {"free": (7, 6), "ball": (4, 3), "hinge": (1, 1), "slide": (1, 1)}


def _joints(root, defaults, ctx=None) -> list:
    """Joints in MuJoCo's order (bodies in preorder, each body's joints through its frames)
    as (element, type, qpos0); qpos0 is computed only when `ctx` is given."""
    out = []

    def pose(el, decl, cls):
        a = element_attrs(el, decl, defaults, cls, kind="")
        return np.asarray(a["pos"], float), spatial.normvec(ctx.orientation(a))[0]

    def body(el, cls, fpose):
        kids = []
        bpose = None
        if ctx is not None and el.tag == "body":
            p, q = pose(el, "body", cls)
            bpose = spatial.frameaccum(*fpose, p, q) if fpose is not None else (p, q)

        def scan(node, cls, fp):
            for c in node:
                if c.tag == "body":
                    kids.append((c, c.get("childclass") or cls, fp))
                elif c.tag == "frame":
                    fcls = c.get("childclass") or cls
                    sub = None
                    if ctx is not None:
                        p, q = pose(c, "frame", fcls)
                        sub = spatial.frameaccum(*fp, p, q) if fp is not None else (p, q)
                        sub = (sub[0], spatial.normvec(sub[1])[0])
                    scan(c, fcls, sub)
                elif c.tag in ("joint", "freejoint"):
                    if c.tag == "freejoint":
                        typ = "free"
                    else:
                        a = element_attrs(c, "joint", defaults, c.get("class") or cls)
                        typ = a["type"]
                    q0 = None
                    if ctx is not None:
                        if typ == "free":
                            q0 = np.concatenate([bpose[0], spatial.normvec(bpose[1])[0]])
                        elif typ == "ball":
                            q0 = np.array([1.0, 0.0, 0.0, 0.0])
                        else:
                            ref = float(a["ref"])
                            q0 = np.array([ctx.angle(ref) if typ == "hinge" else ref])
                    out.append((c, typ, q0))

        scan(el, cls, None)
        for c, ccls, fp in kids:
            body(c, ccls, fp)

    for wb in root.iterchildren("worldbody"):
        body(wb, "main", None)
    return out


def _actuators(root) -> list:
    return [e for sec in root.iterchildren("actuator") for e in sec
            if e.tag in ACTUATOR_TAGS or e.tag == "plugin"]


def _read_child_keys(croot) -> list:
    """The child's keyframes as per-joint / per-actuator values (MuJoCo's SaveState)."""
    keys = [k for sec in croot.iterchildren("keyframe") for k in sec]
    for sec in list(croot.iterchildren("keyframe")):
        croot.remove(sec)
    if not keys:
        return []
    joints = _joints(croot, Defaults(croot))
    acts = _actuators(croot)
    for i, (el, _t, _q) in enumerate(joints):
        el.set(_JK, str(i))
    for i, el in enumerate(acts):
        el.set(_AK, str(i))
    nq = sum(_WIDTH[t][0] for _e, t, _q in joints)
    nv = sum(_WIDTH[t][1] for _e, t, _q in joints)
    out = []
    for k in keys:
        vals = {}
        for attr, n in (("qpos", nq), ("qvel", nv), ("ctrl", len(acts))):
            text = k.get(attr)
            if text is None or not text.split():
                continue
            v = np.array([float(x) for x in text.split()])
            if len(v) != n:
                raise MJCFError(f"Keyframe '{k.get('name', '')}' has invalid {attr} size, got "
                                f"{len(v)}, should be {n}", k, attr)
            vals[attr] = v
        for attr in ("act", "mpos", "mquat"):
            if k.get(attr) and k.get(attr).split():
                raise MJCFError(f"keyframe '{attr}' of an attached model is not supported by "
                                "jaxsim yet", k, attr)
        jv, qa, va = {}, 0, 0
        for i, (_el, t, _q) in enumerate(joints):
            w, d = _WIDTH[t]
            jv[str(i)] = (vals["qpos"][qa:qa + w] if "qpos" in vals else None,
                          vals["qvel"][va:va + d] if "qvel" in vals else None)
            qa, va = qa + w, va + d
        av = {str(i): vals["ctrl"][i] for i in range(len(acts))} if "ctrl" in vals else {}
        out.append({"name": k.get("name", ""), "time": k.get("time"), "given": set(vals),
                    "jnt": jv, "act": av, "src": k})
    return out


def _write_keys(root, compiler, source, pending: list, nkey: int) -> None:
    """Appends the attached models' keyframes (MuJoCo's pending keyframes)."""
    from jaxsim.mjcf.context import Ctx

    defaults = Defaults(root)
    ctx = Ctx(root, source, defaults, compiler)
    joints = _joints(root, defaults, ctx)
    acts = _actuators(root)
    qpos0 = np.concatenate([q for _e, _t, q in joints]) if joints else np.zeros(0)
    nv = sum(_WIDTH[t][1] for _e, t, _q in joints)
    sec = _section(root, "keyframe")
    own = sum(1 for s in root.iterchildren("keyframe") for _k in s)
    for _ in range(own, nkey):  # MuJoCo adds the <size nkey> keys before the pending ones
        etree.SubElement(sec, "key").set(SRC, sec.get(SRC, ""))
    for key in pending:
        qpos, qvel, ctrl = qpos0.copy(), np.zeros(nv), np.zeros(len(acts))
        qa, va = 0, 0
        seen = set()  # a replicated joint or actuator: the key holds the first copy's value
        for el, t, _q in joints:
            w, d = _WIDTH[t]
            tok = el.get(_JK)
            if tok is not None and tok.split(":")[0] == key["n"] and tok not in seen:
                seen.add(tok)
                q, v = key["jnt"][tok.split(":")[1]]
                if q is not None:
                    qpos[qa:qa + w] = q
                if v is not None:
                    qvel[va:va + d] = v
            qa, va = qa + w, va + d
        for i, el in enumerate(acts):
            tok = el.get(_AK)
            if tok is not None and tok.split(":")[0] == key["n"] and ("a", tok) not in seen:
                seen.add(("a", tok))
                ctrl[i] = key["act"].get(tok.split(":")[1], 0.0)
        k = etree.SubElement(sec, "key")
        k.set(SRC, key["src"].get(SRC, ""))
        k.set("name", key["name"])
        if key["time"] is not None:
            k.set("time", key["time"])
        for attr, v in (("qpos", qpos), ("qvel", qvel), ("ctrl", ctrl)):
            if attr in key["given"]:
                k.set(attr, " ".join(repr(float(x)) for x in v))


# -------------------------------------------------------------------------------- driver


class _Child:
    """One `<model>` asset, read, validated and expanded once."""

    def __init__(self, el, source: Source):
        from jaxsim.mjcf.compile import read_compiler
        from jaxsim.mjcf.expand import expand_all

        fname = el.get("file")
        if not fname:
            raise MJCFError("missing required attribute", el, "file")
        data = source.read(fname, el)
        sub = os.path.dirname(fname)
        model_dir = os.path.join(source.model_dir, sub) if source.model_dir else (sub or None)
        csource = Source(model_dir, source.assets)
        root = read_tree(data, source.display(fname), csource)
        if root.tag != "mujoco":
            raise MJCFError(f"unrecognized model type <{root.tag}> (expected <mujoco>)", root)
        validate(root, "mujoco")
        self.compiler = read_compiler(root)
        expand_all(root, self.compiler, csource)
        _fix_files(root, self.compiler, sub, source)
        self.name = el.get("name") or root.get("model") or "MuJoCo Model"
        self.keys = _read_child_keys(root)
        self.globals = _Globals(root)
        self.root = root


def _named(root, tag: str, name: str, before=None):
    for e in root.iter(tag):
        if before is not None and e is before:
            return None
        if e.get("name") == name:
            return e
    return None


def _context(el) -> str:
    """The class an element inherits from its ancestors' childclass."""
    p = el.getparent()
    while p is not None:
        if p.get("childclass"):
            return p.get("childclass")
        p = p.getparent()
    return "main"


def _doc_before(root, a, b) -> bool:
    for e in root.iter():
        if e is a:
            return True
        if e is b:
            return False
    return False


def expand_attach(root, compiler, source, defer_keys: bool = False):
    """Expands every `<attach>` and removes the `<model>` assets (see module docstring).

    With `defer_keys` the attached models' keyframes are written by the function returned
    (None if there is nothing to write), to be called once the `<replicate>`s around the
    attachments are expanded: a key's values then go to the first copy of each joint."""
    attaches = list(root.iter("attach"))
    children = {}
    for asset in root.iterchildren("asset"):
        for el in list(asset.iterchildren("model")):
            child = _Child(el, source)
            children.setdefault(child.name, child)
            asset.remove(el)
    if not attaches:
        return None
    mode = "warning"
    for el in root.iterchildren("compiler"):
        mode = el.get("conflict", mode)
    pglob, dglob = _Globals(root), _Globals(etree.Element("mujoco"))
    pname = root.get("model", "MuJoCo Model")
    changed: set = set()
    pending: list = []
    for n, att in enumerate(attaches):
        prefix = att.get("prefix", "")
        body, frame, model = att.get("body"), att.get("frame"), att.get("model")
        kind, cname = ("body", body) if body is not None else ("frame", frame)
        parent = att.getparent()
        if model is None:
            if cname is None:
                raise MJCFError("either 'body' or 'frame' attribute must be specified for "
                                "self-attach", att)
            if _named(root, kind, prefix + cname) is not None:
                raise MJCFError(f"cannot self-attach: element {prefix + cname} already exists",
                                att)
            src = _named(root, kind, cname)
            if src is None or not _doc_before(root, src, att):
                raise MJCFError(f"could not find {kind} '{cname}' in the current model for "
                                "self-attachment", att)
            c = copy.deepcopy(src)
            holder = etree.Element("frame")
            holder.append(c)
            _bind_tree(holder, _context(src))
            _prefix_all(c, prefix, assets=False)
            parent.replace(att, c)
            _copy_sections(root, root, _all_names(root), True, prefix)
            continue
        child = children.get(model)
        if child is None:
            raise MJCFError(f"could not find model '{model}'", att, "model")
        if cname is not None and _named(root, kind, prefix + cname) is not None:
            raise MJCFError(f"cannot attach: element {cname} already exists with prefix {prefix}",
                            att)
        changed |= set(_resolve_conflicts(att, pglob, child.globals, mode, pname, child.name,
                                          dglob))
        croot = copy.deepcopy(child.root)
        for e in croot.iter():
            for mark in (_JK, _AK):
                if e.get(mark) is not None:
                    e.set(mark, f"{n}:{e.get(mark)}")
        _bind_classes(croot, lambda v: v)  # explicit classes first: units read them
        _convert_units(croot, child.compiler, compiler)
        _bind_classes(croot, lambda v, p=prefix: p + v)
        defs = _child_defaults(croot, prefix)
        _prefix_all(croot, prefix)
        _prefix_all(defs, prefix)
        wb = croot.find("worldbody")
        if cname is not None:
            src = _named(wb, kind, prefix + cname) if wb is not None else None
            if src is None:
                raise MJCFError(f"could not find {kind} '{cname}' in model asset '{model}'", att)
        else:
            src = etree.Element("frame")
            src.set(SRC, att.get(SRC, ""))
            for c in list(wb) if wb is not None else []:
                src.append(c)
        _isolate_parent_main(root)
        tops = [d for d in root.iterchildren("default") if d.get("class", "main") == "main"]
        if not tops:
            tops = [etree.Element("default")]
            root.insert(0, tops[0])
        tops[0].append(defs)
        parent.replace(att, src)
        _copy_sections(root, croot, _all_names(root), False, prefix)
        for key in child.keys:
            pending.append(dict(key, name=prefix + key["name"], n=str(n)))
    _write_globals(root, pglob, changed)
    nkey = int(pglob.val["nkey"])

    def finish():
        if pending:
            _write_keys(root, compiler, source, pending, nkey)
        for e in root.iter():
            for mark in (_JK, _AK):
                if mark in e.attrib:
                    del e.attrib[mark]

    if defer_keys:
        return finish
    finish()
    return None
