"""Section passes of the compiler: tendons, actuators, sensors, equality, contact, custom, keys.

Each `compile_X(ctx)` reads its top-level sections (there may be several, processed in
document order), registers names in id order and writes its Model fields and counts into
`ctx.out`, with MuJoCo's layouts and the values MuJoCo's compiler stores (quantities that
MuJoCo computes later in `mj_setConst` are left for `jaxsim.constants.set_const`).
The driver (`jaxsim.mjcf.compile`) calls them in MuJoCo's order: tendons, actuators,
sensors, equality, contact, custom, keyframes.
"""

from __future__ import annotations

import math

import numpy as np

from jaxsim.mjcf.errors import MJCFError
from jaxsim.mjcf.flex import compile_flex
from jaxsim.mjcf.sections_actuator import compile_actuators
from jaxsim.mjcf.sections_common import (
    LIMITED,
    SOLIMP,
    SOLREF,
    chain,
    check_limited,
    fresh,
    is_limited,
    nuser,
    own_attrs,
    read_into,
    sections,
)
from jaxsim.mjcf.sections_sensor import compile_sensors
from jaxsim.types import EqType, GeomType, JointType, ObjType, WrapType

__all__ = ["compile_tendons", "compile_actuators", "compile_sensors", "compile_equality",
           "compile_contact", "compile_custom", "compile_keyframes", "compile_flex"]

MJEPS = 1e-14
MJMINVAL = 1e-15

# ------------------------------------------------------------------------------- tendons

# mjs_defaultTendon, keyed by XML attribute name
_TENDON = {
    "group": 0, "limited": "auto", "actuatorfrclimited": "auto",
    "range": np.zeros(2), "actuatorfrcrange": np.zeros(2),
    "solreflimit": np.array(SOLREF), "solimplimit": np.array(SOLIMP),
    "solreffriction": np.array(SOLREF), "solimpfriction": np.array(SOLIMP),
    "frictionloss": 0.0, "width": 0.003, "material": "", "margin": 0.0,
    "stiffness": np.zeros(3), "damping": np.zeros(3), "armature": 0.0,
    "rgba": np.array([0.5, 0.5, 0.5, 1.0]), "user": np.zeros(0),
    "springlength": np.array([-1.0, -1.0]), "springyield": 0.0,
}


def _tendon_step(rec: dict, attrs: dict, el) -> None:
    # springlength: one value sets both ends of the dead band
    read_into(rec, {k: v for k, v in attrs.items() if k != "springlength"}, "spatial", el=el)
    if "springlength" in attrs:
        vals = [float(t) for t in attrs["springlength"].split()]
        sl = rec["springlength"].copy()
        sl[: len(vals)] = vals
        if len(vals) == 1:
            sl[1] = sl[0]
        rec["springlength"] = sl


def _plastic_layout(out: dict) -> None:
    """Addresses in the plastic state of the springs with a positive yield: joints first (1
    value, 4 for a ball's quaternion), then tendons (their dead band, 2 values)."""
    jtype = np.asarray(out.get("jnt_type", np.zeros(0, np.int64)))
    jy = np.asarray(out.get("jnt_springyield", np.zeros(len(jtype))), np.float64)
    width = np.where(jtype == JointType.BALL, 4, 1) * (jy > 0)
    ty = np.asarray(out["tendon_springyield"], np.float64)
    widths = np.concatenate([width, 2 * (ty > 0)]).astype(np.int64)
    adr = np.concatenate([[0], np.cumsum(widths)[:-1]]).astype(np.int64)
    adr = np.where(widths > 0, adr, -1)
    out["jnt_plasticadr"] = adr[:len(jtype)]
    out["tendon_plasticadr"] = adr[len(jtype):]
    out["nplastic"] = int(widths.sum())


def _wrap_error(el, tid: int, msg: str, attr=None) -> MJCFError:
    name = el.get("name")
    who = f"tendon '{name}' (id = {tid})" if name else f"tendon {tid}"
    return MJCFError(f"{who}: {msg}", el, attr)


def compile_tendons(ctx) -> None:
    """Fills tendon_* and wrap_* (fixed and spatial tendons, with their paths)."""
    out = ctx.out
    njnt = out.get("njnt", 0)
    jnt_type = np.asarray(out.get("jnt_type", np.zeros(njnt, np.int64)))
    geom_type = np.asarray(out.get("geom_type", np.zeros(0, np.int64)))
    recs, paths, els = [], [], []
    for el in sections(ctx, "tendon"):
        tid = ctx.add_name(ObjType.TENDON, el.get("name"), el)
        rec = fresh(_TENDON)
        for _tag, attrs in chain(ctx, el, "tendon"):
            _tendon_step(rec, attrs, el)
        _tendon_step(rec, {k: v for k, v in own_attrs(el).items() if k != "class"}, el)
        recs.append(rec)
        els.append(el)
        paths.append([w for w in el if isinstance(w.tag, str)])
        del tid

    wtype, wobj, wprm, adr, num = [], [], [], [], []
    for tid, (el, rec, path) in enumerate(zip(els, recs, paths, strict=True)):
        adr.append(len(wtype))
        num.append(len(path))
        if not path:
            raise _wrap_error(el, tid, "path cannot be empty")
        spatial = path[0].tag != "joint"
        if spatial and len(path) < 2:
            raise _wrap_error(el, tid, "spatial path must contain at least two objects")
        if spatial and rec["width"] <= 0:
            raise _wrap_error(el, tid, "must have positive width", "width")
        types = []
        for j, w in enumerate(path):
            if w.tag == "joint":
                jid = ctx.lookup(ObjType.JOINT, w.get("joint"), w, "joint")
                if w.get("coef") is None:
                    raise MJCFError("required attribute missing: 'coef'", w, "coef")
                if jnt_type[jid] not in (JointType.SLIDE, JointType.HINGE):
                    raise MJCFError(f"joint '{w.get('joint')}' in tendon {tid}, wrap {j} must be "
                                    "slide or hinge", w, "joint")
                types.append(WrapType.JOINT)
                wobj.append(jid)
                wprm.append(float(w.get("coef")))
            elif w.tag == "site":
                types.append(WrapType.SITE)
                wobj.append(ctx.lookup(ObjType.SITE, w.get("site"), w, "site"))
                wprm.append(0.0)
            elif w.tag == "geom":
                gid = ctx.lookup(ObjType.GEOM, w.get("geom"), w, "geom")
                gt = geom_type[gid] if gid < len(geom_type) else GeomType.SPHERE
                if gt == GeomType.CYLINDER:
                    types.append(WrapType.CYLINDER)
                elif gt == GeomType.SPHERE:
                    types.append(WrapType.SPHERE)
                else:
                    raise MJCFError(f"geom '{w.get('geom')}' in tendon {tid}, wrap {j} is not "
                                    "sphere or cylinder", w, "geom")
                side = -1
                if w.get("sidesite") is not None:
                    side = ctx.lookup(ObjType.SITE, w.get("sidesite"), w, "sidesite")
                wobj.append(gid)
                wprm.append(float(side))
            elif w.tag == "pulley":
                if w.get("divisor") is None:
                    raise MJCFError("required attribute missing: 'divisor'", w, "divisor")
                div = float(w.get("divisor"))
                if div < 0:
                    raise MJCFError(f"pulley has negative divisor in tendon {tid}, wrap {j}",
                                    w, "divisor")
                types.append(WrapType.PULLEY)
                wobj.append(-1)
                wprm.append(div)
            else:  # the schema admits nothing else
                raise MJCFError("unknown wrap type", w)
        wtype.extend(types)
        _check_path(el, tid, spatial, types, wobj[adr[-1]:], rec["armature"])

        # limits (autolimits rule), then their consistency
        rec["limited"] = LIMITED[rec["limited"]]
        check_limited(el, ctx.compiler.autolimits, "tendon", "", rec["limited"], rec["range"])
        if rec["range"][0] >= rec["range"][1] and is_limited(rec["limited"], rec["range"]):
            raise MJCFError("invalid limits in tendon", el, "range")
        rec["actuatorfrclimited"] = LIMITED[rec["actuatorfrclimited"]]
        afr = rec["actuatorfrcrange"]
        check_limited(el, ctx.compiler.autolimits, "tendon", "actuatorfrc",
                      rec["actuatorfrclimited"], afr)
        if is_limited(rec["actuatorfrclimited"], afr) and (afr[0] >= afr[1] or afr[0] > 0
                                                           or afr[1] < 0):
            raise MJCFError("invalid actuatorfrcrange in tendon", el, "actuatorfrcrange")
        if rec["springlength"][0] > rec["springlength"][1]:
            raise MJCFError("invalid springlength in tendon", el, "springlength")
        if rec["springyield"] < 0:
            raise MJCFError("springyield cannot be negative in tendon", el, "springyield")

    nt = len(recs)
    def f(key):
        return np.array([np.atleast_1d(r[key]) for r in recs], dtype=np.float64).reshape(nt, -1) \
            if nt else np.zeros((0, np.size(_TENDON[key])))
    out["ntendon"] = nt
    out["nwrap"] = len(wtype)
    out["tendon_adr"] = np.array(adr, dtype=np.int64)
    out["tendon_num"] = np.array(num, dtype=np.int64)
    out["tendon_limited"] = np.array([is_limited(r["limited"], r["range"]) for r in recs],
                                     dtype=np.int64)
    out["tendon_actfrclimited"] = np.array(
        [is_limited(r["actuatorfrclimited"], r["actuatorfrcrange"]) for r in recs], dtype=np.int64)
    out["tendon_solref_lim"] = f("solreflimit").reshape(nt, 2)
    out["tendon_solimp_lim"] = f("solimplimit").reshape(nt, 5)
    out["tendon_solref_fri"] = f("solreffriction").reshape(nt, 2)
    out["tendon_solimp_fri"] = f("solimpfriction").reshape(nt, 5)
    out["tendon_range"] = f("range").reshape(nt, 2)
    out["tendon_actfrcrange"] = f("actuatorfrcrange").reshape(nt, 2)
    out["tendon_margin"] = f("margin").reshape(nt)
    stiff, damp = f("stiffness").reshape(nt, 3), f("damping").reshape(nt, 3)
    out["tendon_stiffness"], out["tendon_stiffnesspoly"] = stiff[:, 0], stiff[:, 1:]
    out["tendon_damping"], out["tendon_dampingpoly"] = damp[:, 0], damp[:, 1:]
    out["tendon_armature"] = f("armature").reshape(nt)
    out["tendon_frictionloss"] = f("frictionloss").reshape(nt)
    out["tendon_hasfrictionloss"] = out["tendon_frictionloss"] > 0
    out["tendon_lengthspring"] = f("springlength").reshape(nt, 2)
    out["tendon_springyield"] = f("springyield").reshape(nt)
    _plastic_layout(out)
    out["tendon_width"] = f("width").reshape(nt)
    out["tendon_length0"] = np.zeros(nt)
    out["tendon_invweight0"] = np.zeros(nt)
    out["tendon_user"] = nuser(ctx, "nuser_tendon", [r["user"] for r in recs], els)
    out["wrap_type"] = np.array(wtype, dtype=np.int64)
    out["wrap_objid"] = np.array(wobj, dtype=np.int64)
    out["wrap_prm"] = np.array(wprm, dtype=np.float64)
    _tendon_trees(ctx)


def _check_path(el, tid, spatial, types, objs, armature) -> None:
    """MuJoCo's path rules (mjCTendon::Compile)."""
    sz = len(types)
    for i, t in enumerate(types):
        if not spatial:
            if t != WrapType.JOINT:
                raise _wrap_error(el, tid, f"spatial object found in fixed path at pos {i}")
            continue
        if armature < 0:
            raise _wrap_error(el, tid, "tendon armature cannot be negative", "armature")
        prev = types[i - 1] if i > 0 else None
        nxt = types[i + 1] if i < sz - 1 else None
        if t == WrapType.PULLEY:
            if prev == WrapType.PULLEY:
                raise _wrap_error(el, tid, f"consecutive pulleys (pos {i})")
            if i == sz - 1:
                raise _wrap_error(el, tid, "path ends with pulley")
        elif t == WrapType.SITE:
            if (prev is None or prev == WrapType.PULLEY) and (nxt is None or nxt == WrapType.PULLEY):
                raise _wrap_error(el, tid, f"site {i} needs a neighbor that is not a pulley")
            if nxt == WrapType.SITE and objs[i] == objs[i + 1]:
                raise _wrap_error(el, tid, f"site {i} is repeated")
        elif t in (WrapType.SPHERE, WrapType.CYLINDER):
            if prev != WrapType.SITE or nxt != WrapType.SITE:
                raise _wrap_error(el, tid, f"geom at pos {i} not bracketed by sites")
            if armature > 0:
                raise _wrap_error(el, tid, "geom wrapping not supported by tendon armature",
                                  "armature")
        else:  # joint in a spatial path
            raise _wrap_error(el, tid, f"joint wrap found in spatial path at pos {i}")


def tendon_path_trees(out: dict, k: int) -> list[int]:
    """The distinct kinematic trees tendon k's path touches, in path order."""
    btree = np.asarray(out["body_treeid"])
    owner = {WrapType.JOINT: "jnt_bodyid", WrapType.SITE: "site_bodyid",
             WrapType.SPHERE: "geom_bodyid", WrapType.CYLINDER: "geom_bodyid"}
    trees: list[int] = []
    for j in range(out["tendon_adr"][k], out["tendon_adr"][k] + out["tendon_num"][k]):
        key = owner.get(int(out["wrap_type"][j]))
        if key is None or out.get(key) is None:
            continue
        t = int(btree[out[key][out["wrap_objid"][j]]])
        if t != -1 and t not in trees:
            trees.append(t)
    return trees


def _tendon_trees(ctx) -> None:
    """tendon_treenum/treeid: the first two distinct kinematic trees a tendon's path touches."""
    out = ctx.out
    nt = out["ntendon"]
    treenum = np.zeros(nt, dtype=np.int64)
    treeid = np.full((nt, 2), -1, dtype=np.int64)
    if out.get("body_treeid") is not None:
        for i in range(nt):
            seen = tendon_path_trees(out, i)
            treeid[i, :min(2, len(seen))] = seen[:2]
            treenum[i] = len(seen)
    out["tendon_treenum"], out["tendon_treeid"] = treenum, treeid


# ------------------------------------------------------------------------------ equality

_EQ_TYPES = {"connect": EqType.CONNECT, "weld": EqType.WELD, "joint": EqType.JOINT,
             "tendon": EqType.TENDON, "flex": EqType.FLEX, "flexvert": EqType.FLEXVERT,
             "flexstrain": EqType.FLEXSTRAIN}
_EQ_DECL = {"connect": "connect", "weld": "weld", "joint": "equality_joint",
            "tendon": "equality_tendon", "flex": "equality_flex"}


def _floats(el, attr: str, n: int, exact: bool) -> list[float] | None:
    text = el.get(attr)
    if text is None:
        return None
    try:
        vals = [float(t) for t in text.split()]
    except ValueError:
        raise MJCFError(f"bad number in '{text}'", el, attr) from None
    if (exact and len(vals) < n) or len(vals) > n:
        raise MJCFError(f"attribute '{attr}' must have {n} values", el, attr)
    return vals


def compile_equality(ctx) -> None:
    """Fills eq_* for connect, weld, joint and tendon constraints."""
    out = ctx.out
    jnt_type = np.asarray(out.get("jnt_type", np.zeros(0, np.int64)))
    rows = []
    for el in sections(ctx, "equality"):
        tag = el.tag
        if tag not in _EQ_DECL:
            raise MJCFError(f"<{tag}> equality constraints are not supported by jaxsim yet", el)
        eid = ctx.add_name(ObjType.EQUALITY, el.get("name"), el)
        rec = {"active": True, "solref": np.array(SOLREF), "solimp": np.array(SOLIMP)}
        for _t, attrs in chain(ctx, el, "equality"):
            read_into(rec, attrs, _EQ_DECL[tag], names=("active", "solref", "solimp"), el=el)
        read_into(rec, own_attrs(el), _EQ_DECL[tag], names=("active", "solref", "solimp"), el=el)
        data = np.zeros(12)
        data[1] = 1.0
        data[10] = 1.0  # torque:force ratio of welds
        objtype = ObjType.UNKNOWN
        name2 = None
        if tag in ("connect", "weld"):
            anchor = _floats(el, "anchor", 3, True)
            if anchor is not None:
                data[0:3] = anchor
            if tag == "weld":
                relpose = _floats(el, "relpose", 7, True)
                if relpose is not None:
                    data[3:10] = relpose
            body_semantic = el.get("body1") is not None and (tag == "weld" or anchor is not None)
            if body_semantic:
                objtype, name1, name2 = ObjType.BODY, el.get("body1"), el.get("body2")
                a1 = "body1"
                if tag == "weld" and anchor is None:
                    data[0:3] = 0.0
            else:
                if el.get("site1") is None or el.get("site2") is None:
                    raise MJCFError(f"{tag} needs site1 and site2, or body1"
                                    + (" and anchor" if tag == "connect" else ""), el)
                objtype, name1, name2 = ObjType.SITE, el.get("site1"), el.get("site2")
                a1 = "site1"
            if tag == "weld":
                ts = _floats(el, "torquescale", 1, True)
                if ts is not None:
                    data[10] = ts[0]
            lookup_type = objtype
        elif tag == "flex":
            a1, lookup_type = "flex", ObjType.FLEX
            name1 = el.get("flex")
            if name1 is None:
                raise MJCFError("required attribute missing: 'flex'", el, "flex")
        else:
            a1 = f"{tag}1"
            name1, name2 = el.get(a1), el.get(f"{tag}2")
            if name1 is None:
                raise MJCFError(f"required attribute missing: '{a1}'", el, a1)
            poly = _floats(el, "polycoef", 5, False)
            if poly is not None:
                data[: len(poly)] = poly
            lookup_type = ObjType.JOINT if tag == "joint" else ObjType.TENDON
        id1 = ctx.lookup(lookup_type, name1, el, a1)
        if name2 is not None:
            id2 = ctx.lookup(lookup_type, name2, el, a1[:-1] + "2")
        else:
            id2 = 0 if lookup_type == ObjType.BODY else -1
        if tag == "flex":
            out["flex_edgeequality"][id1] = 1
        if id1 == id2:
            raise MJCFError(f"element '{name1}' is repeated in equality constraint {eid}", el)
        if tag == "joint":
            for jid in (id1, id2):
                if jid >= 0 and jnt_type[jid] not in (JointType.HINGE, JointType.SLIDE):
                    raise MJCFError("only HINGE and SLIDE joint allowed in constraint", el)
        rows.append((_EQ_TYPES[tag], id1, id2, int(objtype), rec, data))

    n = len(rows)
    out["neq"] = n
    out["eq_type"] = np.array([r[0] for r in rows], dtype=np.int64)
    out["eq_obj1id"] = np.array([r[1] for r in rows], dtype=np.int64)
    out["eq_obj2id"] = np.array([r[2] for r in rows], dtype=np.int64)
    out["eq_objtype"] = np.array([r[3] for r in rows], dtype=np.int64)
    out["eq_active0"] = np.array([bool(r[4]["active"]) for r in rows], dtype=np.int64)
    out["eq_solref"] = np.array([r[4]["solref"] for r in rows], dtype=np.float64).reshape(n, 2)
    out["eq_solimp"] = np.array([r[4]["solimp"] for r in rows], dtype=np.float64).reshape(n, 5)
    out["eq_data"] = np.array([r[5] for r in rows], dtype=np.float64).reshape(n, 12)


# ------------------------------------------------------------------------------- contact

_PAIR = {"condim": 3, "friction": np.array([1.0, 1.0, 0.005, 0.0001, 0.0001]),
         "solref": np.array(SOLREF), "solreffriction": np.zeros(2),
         "solimp": np.array(SOLIMP), "gap": 0.0, "margin": 0.0, "adhesion": 0.0}
_PAIR_ATTRS = tuple(_PAIR)


def compile_contact(ctx) -> None:
    """Fills pair_* and exclude_signature, sorted by body signature as MuJoCo does."""
    out = ctx.out
    geom_body = np.asarray(out.get("geom_bodyid", np.zeros(0, np.int64)))
    pairs, excludes = [], []
    for el in sections(ctx, "contact"):
        if el.tag == "pair":
            rec = fresh(_PAIR)
            for _t, attrs in chain(ctx, el, "pair"):
                read_into(rec, attrs, "pair", names=_PAIR_ATTRS, el=el)
            read_into(rec, own_attrs(el), "pair", names=_PAIR_ATTRS, el=el)
            if rec["condim"] not in (1, 3, 4, 6):
                raise MJCFError("invalid condim in contact pair", el, "condim")
            for a in ("geom1", "geom2"):
                if el.get(a) is None:
                    raise MJCFError(f"required attribute missing: '{a}'", el, a)
            g1 = ctx.lookup(ObjType.GEOM, el.get("geom1"), el, "geom1")
            g2 = ctx.lookup(ObjType.GEOM, el.get("geom2"), el, "geom2")
            if geom_body[g1] > geom_body[g2]:
                g1, g2 = g2, g1
            sig = (int(geom_body[g1]) << 16) + int(geom_body[g2])
            pairs.append((sig, g1, g2, rec, el))
        elif el.tag == "exclude":
            for a in ("body1", "body2"):
                if el.get(a) is None:
                    raise MJCFError(f"required attribute missing: '{a}'", el, a)
            b1 = ctx.lookup(ObjType.BODY, el.get("body1"), el, "body1")
            b2 = ctx.lookup(ObjType.BODY, el.get("body2"), el, "body2")
            b1, b2 = min(b1, b2), max(b1, b2)
            excludes.append(((b1 << 16) + b2, el))
    # stable sort by signature; ids (and names) follow the sorted order
    pairs.sort(key=lambda p: p[0])
    excludes.sort(key=lambda e: e[0])
    for p in pairs:
        ctx.add_name(ObjType.PAIR, p[4].get("name"), p[4])
    for e in excludes:
        ctx.add_name(ObjType.EXCLUDE, e[1].get("name"), e[1])
    n = len(pairs)
    out["npair"] = n
    out["pair_dim"] = np.array([p[3]["condim"] for p in pairs], dtype=np.int64)
    out["pair_geom1"] = np.array([p[1] for p in pairs], dtype=np.int64)
    out["pair_geom2"] = np.array([p[2] for p in pairs], dtype=np.int64)
    out["pair_signature"] = np.array([p[0] for p in pairs], dtype=np.int64)
    for key, field, w in (("solref", "pair_solref", 2), ("solreffriction", "pair_solreffriction", 2),
                          ("solimp", "pair_solimp", 5), ("friction", "pair_friction", 5)):
        out[field] = np.array([p[3][key] for p in pairs], dtype=np.float64).reshape(n, w)
    for key in ("margin", "gap", "adhesion"):
        out[f"pair_{key}"] = np.array([p[3][key] for p in pairs], dtype=np.float64)
    out["nexclude"] = len(excludes)
    out["exclude_signature"] = np.array([e[0] for e in excludes], dtype=np.int64)


# -------------------------------------------------------------------------------- custom

_OBJ_NAMES = {t.name.lower(): t for t in ObjType}


def _key_names(ctx) -> dict:
    names = {}
    for i, el in enumerate(sections(ctx, "keyframe")):
        if el.get("name"):
            names.setdefault(el.get("name"), i)
    return names


def compile_custom(ctx) -> None:
    """Fills numeric_*, text_data and tuple_*."""
    out = ctx.out
    nums, texts, tuples = [], [], []
    for el in sections(ctx, "custom"):
        if el.tag == "numeric":
            if el.get("name") is None:
                raise MJCFError("required attribute missing: 'name'", el, "name")
            ctx.add_name(ObjType.NUMERIC, el.get("name"), el)
            size = el.get("size")
            data = [float(t) for t in el.get("data", "").split()]
            if size is not None:
                size = int(size)
                if len(data) > size:
                    raise MJCFError("attribute 'data' has too much data", el, "data")
            else:
                size = len(data)
            if size < 1 or size > 500:
                raise MJCFError("custom field size must be between 1 and 500", el, "size")
            vals = np.zeros(size)
            vals[: len(data)] = data
            nums.append(vals)
        elif el.tag == "text":
            if el.get("name") is None:
                raise MJCFError("required attribute missing: 'name'", el, "name")
            ctx.add_name(ObjType.TEXT, el.get("name"), el)
            data = el.get("data")
            if data is None:
                raise MJCFError("required attribute missing: 'data'", el, "data")
            if not data:
                raise MJCFError("text field cannot be empty", el, "data")
            texts.append(data)
        elif el.tag == "tuple":
            if el.get("name") is None:
                raise MJCFError("required attribute missing: 'name'", el, "name")
            tid = ctx.add_name(ObjType.TUPLE, el.get("name"), el)
            items = []
            for obj in el:
                if not isinstance(obj.tag, str):
                    continue
                tname = obj.get("objtype")
                otype = _OBJ_NAMES.get(tname or "")
                if otype is None or otype == ObjType.UNKNOWN:
                    raise MJCFError("unknown object type", obj, "objtype")
                oname = obj.get("objname")
                if oname is None:
                    raise MJCFError("required attribute missing: 'objname'", obj, "objname")
                prm = float(obj.get("prm", "0"))
                items.append((otype, oname, prm, obj))
            if not items:
                raise MJCFError(f"tuple '{el.get('name')}' (id = {tid}) is empty", el)
            tuples.append(items)
    keynames = None
    objtype, objid, objprm, adr, size = [], [], [], [], []
    for items in tuples:
        adr.append(len(objtype))
        size.append(len(items))
        for otype, oname, prm, obj in items:
            look = ObjType.BODY if otype == ObjType.XBODY else otype
            if look == ObjType.KEY:  # keyframes are compiled after this pass
                keynames = _key_names(ctx) if keynames is None else keynames
                i = keynames.get(oname)
            else:
                i = ctx.ids[int(look)].get(oname)
            if i is None:
                raise MJCFError(f"unrecognized object '{oname}' in tuple", obj, "objname")
            objtype.append(int(otype))
            objid.append(i)
            objprm.append(prm)
    out["nnumeric"] = len(nums)
    out["numeric_size"] = np.array([len(v) for v in nums], dtype=np.int64)
    out["numeric_adr"] = np.cumsum([0] + [len(v) for v in nums])[:-1].astype(np.int64)
    out["numeric_data"] = np.concatenate(nums) if nums else np.zeros(0)
    out["nnumericdata"] = int(sum(len(v) for v in nums))
    out["ntext"] = len(texts)
    out["text_data"] = tuple(texts)
    out["ntextdata"] = int(sum(len(t) + 1 for t in texts))
    out["ntuple"] = len(tuples)
    out["tuple_adr"] = np.array(adr, dtype=np.int64)
    out["tuple_size"] = np.array(size, dtype=np.int64)
    out["tuple_objtype"] = np.array(objtype, dtype=np.int64)
    out["tuple_objid"] = np.array(objid, dtype=np.int64)
    out["tuple_objprm"] = np.array(objprm, dtype=np.float64)
    out["ntupledata"] = len(objtype)


# ------------------------------------------------------------------------------ keyframes


def _normvec(v: np.ndarray) -> None:
    # mjuu_normvec: leave tiny vectors alone, skip vectors already of unit length
    nrm = math.sqrt(float(np.dot(v, v)))
    if nrm * nrm < MJEPS:
        return
    if abs(nrm - 1) > MJEPS:
        v /= nrm


def _normalize4(v: np.ndarray) -> None:
    # mju_normalize4: a (near) zero quaternion becomes the identity
    nrm = math.sqrt(float(np.dot(v, v)))
    if nrm < MJMINVAL:
        v[:] = (1.0, 0.0, 0.0, 0.0)
    elif abs(nrm - 1) > MJMINVAL:
        v *= 1.0 / nrm


def compile_keyframes(ctx) -> None:
    """Fills key_* (missing parts from qpos0, mocap body poses and zeros) and nkey."""
    out = ctx.out
    nq, nv = int(out.get("nq", 0)), int(out.get("nv", 0))
    na, nu = int(out.get("na", 0)), int(out.get("nu", 0))
    nmocap = int(out.get("nmocap", 0))
    qpos0 = np.asarray(out.get("qpos0", np.zeros(nq)), dtype=np.float64)
    mocapid = np.asarray(out.get("body_mocapid", np.zeros(0, np.int64)))
    bpos = np.asarray(out.get("body_pos", np.zeros((0, 3))), dtype=np.float64).reshape(-1, 3)
    bquat = np.asarray(out.get("body_quat", np.zeros((0, 4))), dtype=np.float64).reshape(-1, 4)
    mpos0, mquat0 = np.zeros((nmocap, 3)), np.zeros((nmocap, 4))
    for b, m in enumerate(mocapid):
        if m >= 0:
            mpos0[m], mquat0[m] = bpos[b], bquat[b]
    els = list(sections(ctx, "keyframe"))
    for el in els:
        ctx.add_name(ObjType.KEY, el.get("name"), el)
    nkey = max(len(els), int(getattr(ctx, "size_nkey", 0) or 0))
    for _ in range(len(els), nkey):
        ctx.add_name(ObjType.KEY, None, None)
    time = np.zeros(nkey)
    kq = np.tile(qpos0, (nkey, 1)).reshape(nkey, nq)
    kv, ka, kc = np.zeros((nkey, nv)), np.zeros((nkey, na)), np.zeros((nkey, nu))
    # plastic values not given: NaN here, the reset values once set_const has run
    npl = int(out.get("nplastic", 0))
    kp = np.full((nkey, npl), np.nan)
    kmp = np.tile(mpos0, (nkey, 1, 1)).reshape(nkey, nmocap, 3)
    kmq = np.tile(mquat0, (nkey, 1, 1)).reshape(nkey, nmocap, 4)

    def vec(el, attr):
        text = el.get(attr)
        if text is None:
            return None
        try:
            return np.array([float(t) for t in text.split()], dtype=np.float64)
        except ValueError:
            raise MJCFError(f"bad number in '{text}'", el, attr) from None

    for k, el in enumerate(els):
        label = f"keyframe '{el.get('name') or ''}'"
        if el.get("time") is not None:
            time[k] = float(el.get("time"))
        # shorter vectors are completed (qpos from qpos0, mocap from the bodies, the rest
        # with zeros); longer ones are errors
        for attr, dst, width in (("qpos", kq, nq), ("qvel", kv, nv), ("act", ka, na),
                                 ("ctrl", kc, nu), ("plastic", kp, npl)):
            v = vec(el, attr)
            if v is None or len(v) == 0:
                continue
            if len(v) > width:
                raise MJCFError(f"{label}: invalid {attr} size, expected {width}, got {len(v)}",
                                el, attr)
            dst[k, : len(v)] = v
            if attr not in ("qpos", "plastic"):
                dst[k, len(v):] = 0.0
        for attr, dst, w in (("mpos", kmp, 3), ("mquat", kmq, 4)):
            v = vec(el, attr)
            if v is None or len(v) == 0:
                continue
            if len(v) > w * nmocap:
                raise MJCFError(f"{label}: invalid {attr} size, expected length {w * nmocap}",
                                el, attr)
            flat = dst[k].reshape(-1)
            nfull = len(v) // w  # mocap bodies past the ones given come from the bodies
            flat[: len(v)] = v
            flat[: nfull * w] = v[: nfull * w]
            dst[k] = flat.reshape(nmocap, w)
            dst[k, nfull:] = (mpos0 if w == 3 else mquat0)[nfull:]
    # normalize quaternions as MuJoCo does (copy, then mj_normalizeQuat)
    jtype = np.asarray(out.get("jnt_type", np.zeros(0, np.int64)))
    jadr = np.asarray(out.get("jnt_qposadr", np.zeros(0, np.int64)))
    for k in range(nkey):
        for j, t in enumerate(jtype):
            if t in (JointType.BALL, JointType.FREE):
                a = int(jadr[j]) + (3 if t == JointType.FREE else 0)
                q = kq[k, a: a + 4].copy()
                _normvec(q)
                _normalize4(q)
                kq[k, a: a + 4] = q
        for m in range(nmocap):
            q = kmq[k, m].copy()
            _normvec(q)
            kmq[k, m] = q
    out["nkey"] = nkey
    out["key_time"] = time
    out["key_qpos"], out["key_qvel"], out["key_act"], out["key_ctrl"] = kq, kv, ka, kc
    out["key_mpos"], out["key_mquat"] = kmp, kmq
    out["key_plastic"] = kp
