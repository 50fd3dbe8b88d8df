"""The kinematic tree pass: bodies, joints, dofs, geoms, sites, cameras and lights.

Mirrors the order and arithmetic of MuJoCo's compiler: bodies are numbered in depth-first
pre-order of the XML, their joints/geoms/sites/cameras/lights in body order and document
order within a body (frames included); <frame> poses compose onto their children; body
inertias are inferred from geoms when MuJoCo would.
"""

from __future__ import annotations

import math

import numpy as np

from jaxsim.mjcf import spatial
from jaxsim.mjcf.context import Ctx
from jaxsim.mjcf.errors import MJCFError
from jaxsim.mjcf.geom import (
    check_size,
    fluid_coefs,
    fromto,
    geom_aabb,
    geom_inertia,
    geom_rbound,
    geom_volume,
)
from jaxsim.mjcf.parse import SRC
from jaxsim.types import GeomType, JointType, ObjType, SameFrame, SleepPolicy

FRAME_EPS = 1e-6  # poses closer than this count as equal (sameframe flags)
MINVAL = 1e-15
_UNSUPPORTED_IN_BODY = {
    "composite": "<composite>",
    "plugin": "<plugin> (engine plugins)", "attach": "<attach>",
}


class Node:
    """A body (or the world) during compilation."""

    def __init__(self, el, parent, frame, cls):
        self.el, self.parent, self.frame, self.cls = el, parent, frame, cls
        self.children: list[Node] = []
        self.items: dict[str, list] = {k: [] for k in ("joint", "geom", "site", "camera", "light")}
        self.inertial = None
        self.id = -1


def _compose(frame, pos, quat):
    if frame is None:
        return np.asarray(pos, float), np.asarray(quat, float)
    return spatial.frameaccum(frame[0], frame[1], pos, quat)


def _collect(ctx: Ctx, el, node: Node, frame, cls: str) -> None:
    """Walks one body's XML content (through frames), building child nodes and item lists."""
    for child in el:
        tag = child.tag
        if tag == "body":
            ccls = child.get("childclass")
            if ccls is not None:
                ctx.defaults.check_class(ccls, child, "childclass")
            sub = Node(child, node, frame, ccls or cls)
            node.children.append(sub)
            _collect(ctx, child, sub, None, ccls or cls)
        elif tag == "frame":
            ccls = child.get("childclass")
            if ccls is not None:
                ctx.defaults.check_class(ccls, child, "childclass")
            fcls = ccls or cls
            a = ctx.attrs(child, "frame", fcls, kind="")
            fq = spatial.normvec(ctx.orientation(a))[0]
            fpos, fquat = _compose(frame, a["pos"], fq)
            _collect(ctx, child, node, (fpos, spatial.normvec(fquat)[0]), fcls)
        elif tag in ("joint", "freejoint"):
            if node.parent is None:
                raise MJCFError("world body cannot have joints", child)
            node.items["joint"].append((child, frame, cls))
        elif tag in ("geom", "site", "camera", "light"):
            node.items[tag].append((child, frame, cls))
        elif tag == "inertial":
            if node.parent is None:
                raise MJCFError("world body cannot have <inertial>", child)
            if node.inertial is not None:
                raise MJCFError("repeated <inertial>", child)
            node.inertial = (child, frame)
        elif tag in _UNSUPPORTED_IN_BODY:
            raise MJCFError(f"{_UNSUPPORTED_IN_BODY[tag]} is not supported by jaxsim yet", child)
        elif tag == "replicate":
            raise MJCFError("internal: <replicate> should have been expanded", child)
        else:
            raise MJCFError(f"unexpected element inside <{el.tag}>", child)


def _preorder(node: Node, out: list[Node]) -> list[Node]:
    out.append(node)
    for c in node.children:
        _preorder(c, out)
    return out


def _null_pose(pos, quat) -> bool:
    pos_ok = pos is None or bool(np.all(np.abs(np.asarray(pos)) < FRAME_EPS))
    q = np.asarray(quat)
    unit = np.array([1.0, 0.0, 0.0, 0.0])
    q_ok = quat is None or bool(np.all(np.abs(q - unit) < FRAME_EPS) or
                                np.all(np.abs(q + unit) < FRAME_EPS))
    return pos_ok and q_ok


def _same_pose(p1, p2, q1, q2) -> bool:
    if p1 is not None and not np.all(np.abs(np.asarray(p1) - p2) < FRAME_EPS):
        return False
    if q1 is not None:
        return bool(np.all(np.abs(np.asarray(q1) - q2) < FRAME_EPS) or
                    np.all(np.abs(np.asarray(q1) + q2) < FRAME_EPS))
    return True


def _sameframe(pos, quat, ipos, iquat) -> int:
    if _null_pose(pos, quat):
        return SameFrame.BODY
    if _null_pose(None, quat):
        return SameFrame.BODYROT
    if _same_pose(pos, ipos, quat, iquat):
        return SameFrame.INERTIA
    if _same_pose(None, None, quat, iquat):
        return SameFrame.INERTIAROT
    return SameFrame.NONE


def _limited(a, name: str, rng, autolimits: bool, what: str) -> bool:
    """MuJoCo's limited/autolimits rule for `<name>limited` with range `rng`."""
    flag = a[name]
    if flag == "auto":
        hasrange = not (rng[0] == 0 and rng[1] == 0)
        if not autolimits and hasrange:
            raise a.error(f"{what} has a range but not '{name}'; set autolimits=\"true\" "
                          f"in <compiler>, give '{name}' explicitly, or remove the range", name)
        return bool(rng[0] < rng[1])
    return flag == "true"


# ---------------------------------------------------------------------------------- the pass


def _user(ctx: Ctx, a, key: str, values: list) -> None:
    u = a["user"] if "user" in a else np.zeros(0)
    values.append(np.atleast_1d(np.asarray(u, dtype=np.float64)))


def _pad_user(ctx: Ctx, field: str, nfield: str, rows: list, el_list: list) -> None:
    n = ctx.out.get(nfield, -1)
    longest = max((len(r) for r in rows), default=0)
    if n is None or n < 0:
        n = longest
    for r, el in zip(rows, el_list, strict=True):
        if len(r) > n:
            raise MJCFError(f"user has more values than {nfield}", el, "user")
    ctx.out[nfield] = int(n)
    out = np.zeros((len(rows), n))
    for i, r in enumerate(rows):
        out[i, : len(r)] = r
    ctx.out[field] = out


def compile_tree(ctx: Ctx) -> None:
    """Fills body_*, jnt_*, dof_*, geom_*, site_*, cam_*, light_*, qpos0, tree_* and sizes."""
    comp = ctx.compiler
    world = Node(None, None, None, "main")
    for wb in ctx.root.iterchildren("worldbody"):
        if any(k != SRC for k in wb.keys()):
            raise MJCFError("worldbody has no attributes", wb, [k for k in wb.keys() if k != SRC][0])
        _collect(ctx, wb, world, None, "main")
    nodes = _preorder(world, [])
    for i, n in enumerate(nodes):
        n.id = i
        ctx.add_name(ObjType.BODY, "world" if i == 0 else n.el.get("name"), n.el)
    nbody = len(nodes)

    # -- per-body attributes and weld ids ---------------------------------------------------
    battrs = [None] + [ctx.attrs(n.el, "body", kind="") for n in nodes[1:]]
    weldid = np.zeros(nbody, dtype=np.int64)
    for n in nodes[1:]:
        mocap = battrs[n.id]["mocap"]
        weldid[n.id] = n.id if (n.items["joint"] or mocap) else weldid[n.parent.id]

    # joints: attributes first (geoms need nothing from them)
    jnodes = [(n, item) for n in nodes for item in n.items["joint"]]
    for _n, (el, _f, _c) in jnodes:
        ctx.add_name(ObjType.JOINT, el.get("name"), el)
    gitems = [(n, item) for n in nodes for item in n.items["geom"]]
    for _n, (el, _f, _c) in gitems:
        ctx.add_name(ObjType.GEOM, el.get("name"), el)
    sitems = [(n, item) for n in nodes for item in n.items["site"]]
    for _n, (el, _f, _c) in sitems:
        ctx.add_name(ObjType.SITE, el.get("name"), el)
    citems = [(n, item) for n in nodes for item in n.items["camera"]]
    for _n, (el, _f, _c) in citems:
        ctx.add_name(ObjType.CAMERA, el.get("name"), el)
    litems = [(n, item) for n in nodes for item in n.items["light"]]
    for _n, (el, _f, _c) in litems:
        ctx.add_name(ObjType.LIGHT, el.get("name"), el)

    ngeom, nsite, ncam, nlight, njnt = len(gitems), len(sitems), len(citems), len(litems), len(jnodes)
    G = {k: [] for k in ("type", "contype", "conaffinity", "condim", "bodyid", "dataid", "matid",
                         "group", "priority", "size", "aabb", "rbound", "pos", "quat", "friction",
                         "solmix", "solref", "solimp", "margin", "gap", "fluid", "surfacevel",
                         "adhesion", "user", "rgba", "mass", "inertia", "shell", "el")}
    body_geoms: dict[int, list[int]] = {i: [] for i in range(nbody)}
    for gid, (n, (el, frame, cls)) in enumerate(gitems):
        _compile_geom(ctx, G, n, el, frame, cls, battrs, weldid, nodes)
        body_geoms[n.id].append(gid)

    # -- bodies -----------------------------------------------------------------------------
    B = {k: np.zeros((nbody, w)) for k, w in (("pos", 3), ("quat", 4), ("ipos", 3), ("iquat", 4),
                                                ("inertia", 3))}
    B["quat"][:, 0] = 1
    B["iquat"][:, 0] = 1
    mass = np.zeros(nbody)
    gravcomp = np.zeros(nbody)
    mocapid = np.full(nbody, -1, dtype=np.int64)
    simple_flag = np.ones(nbody, dtype=bool)
    body_user = [np.zeros(0)]
    nmocap = 0
    for n in nodes[1:]:
        a = battrs[n.id]
        i = n.id
        pos = np.asarray(a["pos"], float)
        quat = spatial.normvec(ctx.orientation(a))[0]
        gravcomp[i] = a["gravcomp"]
        simple_flag[i] = a["simple"] != "false"
        _user(ctx, a, "user", body_user)
        if a["mocap"]:
            if n.items["joint"] or n.parent.id != 0:
                raise a.error("mocap body is not a fixed child of world", "mocap")
            mocapid[i] = nmocap
            nmocap += 1
        explicit = n.inertial is not None
        ipos = iquat = None
        bmass, binertia = 0.0, np.zeros(3)
        if explicit:
            iel, iframe = n.inertial
            ia = ctx.attrs(iel, "inertial", kind="")
            for req in ("pos", "mass"):
                if req not in ia:
                    raise ia.error("missing required attribute", req)
            ipos = np.asarray(ia["pos"], float)
            bmass = float(ia["mass"])
            binertia = np.asarray(ia["diaginertia"], float) if "diaginertia" in ia else np.zeros(3)
            alts = [k for k in ("quat", "axisangle", "xyaxes", "zaxis", "euler") if k in ia]
            if "fullinertia" in ia:
                if alts:
                    raise ia.error("fullinertia and inertial orientation cannot both be specified",
                                   "fullinertia")
                if np.any(binertia):
                    raise ia.error("fullinertia and diagonal inertia cannot both be specified",
                                   "fullinertia")
                try:
                    binertia, iquat = spatial.fullinertia(ia["fullinertia"])
                except ValueError as e:
                    raise ia.error(str(e), "fullinertia") from None
            else:
                iquat = spatial.normvec(ctx.orientation(ia))[0]
            if iframe is not None:
                ipos, iquat = spatial.frameaccum(iframe[0], iframe[1], ipos, iquat)
        # inertia from geoms
        ifg = comp.inertiafromgeom
        if ifg == "true" or (ipos is None and ifg == "auto"):
            sel = [g for g in body_geoms[i]
                   if comp.inertiagrouprange[0] <= G["group"][g] <= comp.inertiagrouprange[1]
                   and G["mass"][g] > spatial.EPS]
            if len(sel) == 1:
                g = sel[0]
                ipos, iquat = G["pos"][g].copy(), G["quat"][g].copy()
                bmass, binertia = G["mass"][g], G["inertia"][g].copy()
            elif len(sel) > 1:
                bmass = sum(G["mass"][g] for g in sel)
                if bmass < spatial.EPS:
                    raise a.error("body mass is too small, cannot compute center of mass")
                ipos = sum(G["mass"][g] * G["pos"][g] for g in sel) / bmass
                toti = np.zeros(6)
                for g in sel:
                    toti += spatial.globalinertia(G["inertia"][g], G["quat"][g])
                    toti += spatial.offcenter(G["mass"][g], G["pos"][g] - ipos)
                try:
                    binertia, iquat = spatial.fullinertia(toti)
                except ValueError as e:
                    raise a.error(f"error '{e}' in alternative for principal axes") from None
        if ipos is None:
            # MuJoCo copies the body frame into the (unused) inertial frame of massless bodies
            ipos, iquat = pos.copy(), quat.copy()
        bmass = max(bmass, comp.boundmass)
        binertia = np.maximum(binertia, comp.boundinertia)
        if bmass < 0 or np.any(binertia < 0):
            raise a.error("mass and inertia cannot be negative")
        I0, I1, I2 = binertia
        if I0 + I1 < I2 or I0 + I2 < I1 or I1 + I2 < I0:
            if comp.balanceinertia:
                binertia = np.full(3, (I0 + I1 + I2) / 3.0)
            else:
                raise a.error("inertia must satisfy A + B >= C; use 'balanceinertia' to fix")
        if n.frame is not None:
            pos, quat = spatial.frameaccum(n.frame[0], n.frame[1], pos, quat)
        B["pos"][i], B["quat"][i] = pos, quat
        B["ipos"][i], B["iquat"][i] = ipos, spatial.normvec(iquat)[0]
        mass[i], B["inertia"][i] = bmass, binertia

    # -- joints -----------------------------------------------------------------------------
    J = _compile_joints(ctx, nodes, jnodes)

    # free-joint alignment (compiler alignfree / freejoint align)
    for n in nodes[1:]:
        js = [j for j, (m, _it) in enumerate(jnodes) if m is n]
        if len(js) == 1 and J["type"][js[0]] == JointType.FREE and not n.children:
            align = J["align"][js[0]]
            if align == "true" or (align == "auto" and comp.alignfree):
                i = n.id
                p, q = spatial.frameaccum(B["pos"][i], B["quat"][i], B["ipos"][i], B["iquat"][i])
                ip, iq = spatial.frameinvert(B["ipos"][i], B["iquat"][i])
                B["pos"][i], B["quat"][i] = p, q
                B["ipos"][i], B["iquat"][i] = np.zeros(3), np.array([1.0, 0, 0, 0])
                for g in body_geoms[i]:
                    G["pos"][g], G["quat"][g] = spatial.frameaccum(ip, iq, G["pos"][g], G["quat"][g])
                n.align_inv = (ip, iq)

    S = _compile_sites(ctx, sitems)
    C = _compile_cameras(ctx, citems)
    L = _compile_lights(ctx, litems)
    for n in nodes[1:]:
        inv = getattr(n, "align_inv", None)
        if inv is None:
            continue
        for k, (m, _it) in enumerate(sitems):
            if m is n:
                S["pos"][k], S["quat"][k] = spatial.frameaccum(inv[0], inv[1], S["pos"][k], S["quat"][k])
        for k, (m, _it) in enumerate(citems):
            if m is n:
                C["pos"][k], C["quat"][k] = spatial.frameaccum(inv[0], inv[1], C["pos"][k], C["quat"][k])
        for k, (m, _it) in enumerate(litems):
            if m is n:
                L["pos"][k] = spatial.frameaccum(inv[0], inv[1], L["pos"][k], [1.0, 0, 0, 0])[0]
                L["dir"][k] = spatial.rotvec(inv[1], L["dir"][k])

    # -- assemble ---------------------------------------------------------------------------
    parent = np.array([0] + [n.parent.id for n in nodes[1:]], dtype=np.int64)
    rootid = np.zeros(nbody, dtype=np.int64)
    for i in range(1, nbody):
        rootid[i] = i if parent[i] == 0 else rootid[parent[i]]
    jntnum = np.zeros(nbody, dtype=np.int64)
    jntadr = np.full(nbody, -1, dtype=np.int64)
    dofnum = np.zeros(nbody, dtype=np.int64)
    dofadr = np.full(nbody, -1, dtype=np.int64)
    for j, (n, _it) in enumerate(jnodes):
        if jntadr[n.id] < 0:
            jntadr[n.id] = j
        jntnum[n.id] += 1
    nv = int(sum(JointType(t).dof_width() for t in J["type"]))
    dof_bodyid = np.zeros(nv, dtype=np.int64)
    dof_jntid = np.zeros(nv, dtype=np.int64)
    dof_parentid = np.full(nv, -1, dtype=np.int64)
    lastdof = np.full(nbody, -1, dtype=np.int64)
    d = 0
    for i in range(nbody):
        lastdof[i] = lastdof[parent[i]] if i > 0 else -1
        for j in range(jntadr[i], jntadr[i] + jntnum[i]) if jntnum[i] else ():
            for _k in range(JointType(J["type"][j]).dof_width()):
                if dofadr[i] < 0:
                    dofadr[i] = d
                dof_bodyid[d], dof_jntid[d] = i, j
                dof_parentid[d] = lastdof[i]
                lastdof[i] = d
                dofnum[i] += 1
                d += 1
        if dofnum[i] > 6:
            raise MJCFError("more than 6 dofs in body", nodes[i].el)
    # validity checks MuJoCo makes per body
    for n in nodes[1:]:
        types = [J["type"][j] for j in range(jntadr[n.id], jntadr[n.id] + jntnum[n.id])]
        if JointType.FREE in types and (len(types) > 1):
            raise MJCFError("free joint can only appear by itself", n.el)
        if JointType.FREE in types and parent[n.id] != 0:
            raise MJCFError("free joint can only be used on top level", n.el)
        hasball = False
        for t in types:
            if t in (JointType.BALL, JointType.HINGE) and hasball:
                raise MJCFError("ball followed by rotation in body", n.el)
            hasball |= t == JointType.BALL
        if types and (mass[n.id] < MINVAL or np.any(B["inertia"][n.id] < MINVAL)):
            # MuJoCo allows a massless moving body only if a descendant carries mass; mirror
            # its check (CheckBodyMassInertia): a body with joints needs mass somewhere below.
            if not _subtree_has_mass(n, mass, B["inertia"]):
                raise MJCFError("mass and inertia of moving bodies must be larger than mjMINVAL",
                                n.el)

    nq = 0
    qposadr = np.zeros(njnt, dtype=np.int64)
    jdofadr = np.zeros(njnt, dtype=np.int64)
    dd = 0
    for j in range(njnt):
        qposadr[j] = nq
        jdofadr[j] = dd
        nq += JointType(J["type"][j]).qpos_width()
        dd += JointType(J["type"][j]).dof_width()
    qpos0 = np.zeros(nq)
    qpos_spring = np.zeros(nq)
    for j, (n, _it) in enumerate(jnodes):
        a = qposadr[j]
        t = J["type"][j]
        if t == JointType.FREE:
            qpos0[a:a + 3], qpos0[a + 3:a + 7] = B["pos"][n.id], B["quat"][n.id]
            qpos_spring[a:a + 7] = qpos0[a:a + 7]
        elif t == JointType.BALL:
            qpos0[a:a + 4] = qpos_spring[a:a + 4] = [1, 0, 0, 0]
        else:
            qpos0[a], qpos_spring[a] = J["ref"][j], J["springref"][j]

    # sameframe / simple
    sameframe = np.array([SameFrame.BODY if _null_pose(B["ipos"][i], B["iquat"][i]) else
                          SameFrame.BODYROT if _null_pose(None, B["iquat"][i]) else
                          SameFrame.NONE for i in range(nbody)], dtype=np.int64)
    simple = np.zeros(nbody, dtype=np.int64)
    for i in range(nbody):
        p = parent[i]
        simple[i] = int(sameframe[i] == SameFrame.BODY and
                        (rootid[i] == i or (parent[p] == 0 and dofnum[p] == 0)))
        if not simple_flag[i]:
            simple[i] = 0
        if p > 0:
            simple[p] = 0
        rotfound = False
        for j in range(jntadr[i], jntadr[i] + jntnum[i]) if jntnum[i] else ():
            ax = J["axis"][j]
            aligned = int(np.sum(np.abs(ax) > spatial.EPS)) == 1
            if rotfound or not _null_pose(J["pos"][j], None) or (
                    J["type"][j] in (JointType.HINGE, JointType.SLIDE) and not aligned):
                simple[i] = 0
            rotfound |= J["type"][j] in (JointType.BALL, JointType.HINGE)
        if simple[i] and dofnum[i]:
            types = [J["type"][j] for j in range(jntadr[i], jntadr[i] + jntnum[i])]
            simple[i] = 2 if all(t == JointType.SLIDE for t in types) else 1
    dof_simplenum = np.zeros(nv, dtype=np.int64)
    count = 0
    for k in range(nv - 1, -1, -1):
        count = count + 1 if simple[dof_bodyid[k]] else 0
        dof_simplenum[k] = count

    ntree = int(np.sum(dof_parentid == -1))
    dof_treeid = np.cumsum(dof_parentid == -1) - 1 if nv else np.zeros(0, dtype=np.int64)
    body_treeid = np.array([dof_treeid[dofadr[weldid[i]]] if dofnum[weldid[i]] else -1
                            for i in range(nbody)], dtype=np.int64)
    dof_Madr = np.zeros(nv, dtype=np.int64)
    nM = 0
    for k in range(nv):
        dof_Madr[k] = nM
        j = k
        while j >= 0:
            nM += 1
            j = dof_parentid[j]
    tree_bodyadr, tree_bodynum, tree_dofadr, tree_dofnum = [], [], [], []
    # sleep policy: 'auto' unless the tree's root body says otherwise (the compiler
    # resolves 'auto' once actuators and tendons are known, see compile._sleep_policy)
    policy = np.full(ntree, SleepPolicy.AUTO, dtype=np.int64)
    for n in nodes[1:]:
        sp = battrs[n.id]["sleep"]
        if sp is None or sp == "auto":
            continue
        t = body_treeid[n.id]
        if t < 0 or t == body_treeid[n.id - 1]:
            raise battrs[n.id].error("sleep policy only allowed for movable root bodies", "sleep")
        policy[t] = SleepPolicy[sp.upper()]
    for t in range(ntree):
        bs = np.nonzero(body_treeid == t)[0]
        ds = np.nonzero(dof_treeid == t)[0]
        tree_bodyadr.append(bs[0]), tree_bodynum.append(len(bs))
        tree_dofadr.append(ds[0]), tree_dofnum.append(len(ds))

    body_geomnum = np.array([len(body_geoms[i]) for i in range(nbody)], dtype=np.int64)
    body_geomadr = np.array([body_geoms[i][0] if body_geoms[i] else -1 for i in range(nbody)],
                            dtype=np.int64)
    contype = np.zeros(nbody, dtype=np.int64)
    conaff = np.zeros(nbody, dtype=np.int64)
    margin = np.zeros(nbody)
    for g in range(ngeom):
        b = G["bodyid"][g]
        contype[b] |= G["contype"][g]
        conaff[b] |= G["conaffinity"][g]
        margin[b] = max(margin[b], G["margin"][g] + G["gap"][g])

    out = ctx.out
    out.update(nbody=nbody, njnt=njnt, nq=nq, nv=nv, ngeom=ngeom, nsite=nsite, ncam=ncam,
               nlight=nlight, nmocap=nmocap, ntree=ntree, nM=nM,
               ngravcomp=int(np.sum(gravcomp[1:] != 0)))
    out.update(
        body_parentid=parent, body_rootid=rootid, body_weldid=weldid, body_mocapid=mocapid,
        body_jntnum=jntnum, body_jntadr=jntadr, body_dofnum=dofnum, body_dofadr=dofadr,
        body_treeid=body_treeid, body_geomnum=body_geomnum, body_geomadr=body_geomadr,
        body_simple=simple, body_sameframe=sameframe, body_contype=contype,
        body_conaffinity=conaff, body_pos=B["pos"], body_quat=B["quat"], body_ipos=B["ipos"],
        body_iquat=B["iquat"], body_mass=mass, body_subtreemass=np.zeros(nbody),
        body_inertia=B["inertia"], body_invweight0=np.zeros((nbody, 2)), body_gravcomp=gravcomp,
        body_margin=margin, qpos0=qpos0, qpos_spring=qpos_spring,
        dof_bodyid=dof_bodyid, dof_jntid=dof_jntid, dof_parentid=dof_parentid,
        dof_treeid=dof_treeid.astype(np.int64), dof_Madr=dof_Madr, dof_simplenum=dof_simplenum,
        tree_bodyadr=np.array(tree_bodyadr, dtype=np.int64),
        tree_bodynum=np.array(tree_bodynum, dtype=np.int64),
        tree_dofadr=np.array(tree_dofadr, dtype=np.int64),
        tree_dofnum=np.array(tree_dofnum, dtype=np.int64), tree_sleep_policy=policy,
    )
    _pad_user(ctx, "body_user", "nuser_body", body_user, [n.el for n in nodes])
    # joints and dofs
    out.update(
        jnt_type=np.array(J["type"], dtype=np.int64).reshape(njnt), jnt_qposadr=qposadr,
        jnt_dofadr=jdofadr,
        jnt_bodyid=np.array([n.id for n, _ in jnodes], dtype=np.int64).reshape(njnt),
        jnt_group=np.array(J["group"], dtype=np.int64).reshape(njnt),
        jnt_limited=np.array(J["limited"], dtype=bool).reshape(njnt),
        jnt_actfrclimited=np.array(J["actfrclimited"], dtype=bool).reshape(njnt),
        jnt_actgravcomp=np.array(J["actgravcomp"], dtype=bool).reshape(njnt),
        jnt_solref=np.array(J["solreflimit"]).reshape(njnt, 2),
        jnt_solimp=np.array(J["solimplimit"]).reshape(njnt, 5),
        jnt_pos=np.array(J["pos"]).reshape(njnt, 3), jnt_axis=np.array(J["axis"]).reshape(njnt, 3),
        jnt_stiffness=np.array([s[0] for s in J["stiffness"]]).reshape(njnt),
        jnt_springyield=np.array(J["springyield"], dtype=np.float64).reshape(njnt),
        jnt_stiffnesspoly=np.array([s[1:3] for s in J["stiffness"]]).reshape(njnt, 2),
        jnt_range=np.array(J["range"]).reshape(njnt, 2),
        jnt_actfrcrange=np.array(J["actfrcrange"]).reshape(njnt, 2),
        jnt_margin=np.array(J["margin"]).reshape(njnt),
    )
    _pad_user(ctx, "jnt_user", "nuser_jnt", J["user"], [it[0] for _, it in jnodes])
    dj = dof_jntid
    out.update(
        dof_solref=np.array(J["solreffriction"]).reshape(njnt, 2)[dj] if nv else np.zeros((0, 2)),
        dof_solimp=np.array(J["solimpfriction"]).reshape(njnt, 5)[dj] if nv else np.zeros((0, 5)),
        dof_frictionloss=np.array(J["frictionloss"]).reshape(njnt)[dj],
        dof_hasfrictionloss=np.array(J["frictionloss"]).reshape(njnt)[dj] != 0,
        dof_armature=np.array(J["armature"]).reshape(njnt)[dj],
        dof_damping=np.array([s[0] for s in J["damping"]]).reshape(njnt)[dj],
        dof_dampingpoly=np.array([s[1:3] for s in J["damping"]]).reshape(njnt, 2)[dj],
        dof_invweight0=np.zeros(nv), dof_M0=np.zeros(nv), dof_length=np.ones(nv),
    )
    ctx.joint_springdamper = J["springdamper"]
    # geoms
    gsame = np.array([_sameframe(G["pos"][g], G["quat"][g], B["ipos"][G["bodyid"][g]],
                                 B["iquat"][G["bodyid"][g]]) for g in range(ngeom)], dtype=np.int64)
    ia = lambda k, w=None: (np.array(G[k], dtype=np.int64).reshape(ngeom) if w is None  # noqa: E731
                           else None)
    fa = lambda k, *w: np.array(G[k], dtype=np.float64).reshape((ngeom,) + w)  # noqa: E731
    out.update(
        geom_type=ia("type"), geom_contype=ia("contype"), geom_conaffinity=ia("conaffinity"),
        geom_condim=ia("condim"), geom_bodyid=ia("bodyid"), geom_dataid=ia("dataid"),
        geom_matid=ia("matid"), geom_group=ia("group"), geom_priority=ia("priority"),
        geom_sameframe=gsame, geom_solmix=fa("solmix"), geom_solref=fa("solref", 2),
        geom_solimp=fa("solimp", 5), geom_size=fa("size", 3), geom_aabb=fa("aabb", 6),
        geom_rbound=fa("rbound"), geom_pos=fa("pos", 3), geom_quat=fa("quat", 4),
        geom_friction=fa("friction", 3), geom_margin=fa("margin"), geom_gap=fa("gap"),
        geom_fluid=fa("fluid", 12), geom_surfacevel=fa("surfacevel", 6),
        geom_adhesion=fa("adhesion"), geom_rgba=fa("rgba", 4),
    )
    ctx.geom_mass = np.array(G["mass"]).reshape(ngeom)
    _pad_user(ctx, "geom_user", "nuser_geom", G["user"], G["el"])
    # sites
    ssame = np.array([_sameframe(S["pos"][k], S["quat"][k], B["ipos"][S["bodyid"][k]],
                                 B["iquat"][S["bodyid"][k]]) for k in range(nsite)], dtype=np.int64)
    out.update(
        site_type=np.array(S["type"], dtype=np.int64).reshape(nsite),
        site_bodyid=np.array(S["bodyid"], dtype=np.int64).reshape(nsite),
        site_group=np.array(S["group"], dtype=np.int64).reshape(nsite), site_sameframe=ssame,
        site_size=np.array(S["size"]).reshape(nsite, 3), site_pos=np.array(S["pos"]).reshape(nsite, 3),
        site_quat=np.array(S["quat"]).reshape(nsite, 4),
    )
    _pad_user(ctx, "site_user", "nuser_site", S["user"], S["el"])
    out.update({f"cam_{k}": v for k, v in C.items() if k not in ("user", "el")})
    _pad_user(ctx, "cam_user", "nuser_cam", C["user"], C["el"])
    out.update({f"light_{k}": v for k, v in L.items()})


def _subtree_has_mass(n: Node, mass, inertia) -> bool:
    if mass[n.id] >= MINVAL and np.all(inertia[n.id] >= MINVAL):
        return True
    # a static (jointless) child carrying mass makes the moving body valid
    return any(_subtree_has_mass(c, mass, inertia) for c in n.children if not c.items["joint"])


def _compile_geom(ctx: Ctx, G: dict, n: Node, el, frame, cls, battrs, weldid, nodes) -> None:
    comp = ctx.compiler
    a = ctx.attrs(el, "geom", cls)
    gtype = GeomType[a["type"].upper()]
    if gtype == GeomType.SDF:
        raise a.error("sdf geoms need engine plugins, which jaxsim does not support", "type")
    condim = a["condim"]
    if condim not in (1, 3, 4, 6):
        raise a.error("invalid condim in geom", "condim")
    size = np.asarray(a["size"], dtype=np.float64)
    pos = np.asarray(a["pos"], dtype=np.float64)
    mesh = hfield = None
    dataid = -1
    if "mesh" in a:
        dataid = ctx.lookup(ObjType.MESH, a["mesh"], el, "mesh")
        mesh = ctx.meshes[dataid]
    if "hfield" in a:
        dataid = ctx.lookup(ObjType.HFIELD, a["hfield"], el, "hfield")
        hfield = ctx.out_hfield_size[dataid]
    if gtype == GeomType.MESH and mesh is None:
        raise a.error("mesh geom must have a valid mesh", "mesh")
    if (gtype == GeomType.HFIELD) != (hfield is not None):
        raise a.error("hfield geom must have a valid hfield (and only hfield geoms may)", "hfield")
    if gtype == GeomType.PLANE and weldid[n.id] != 0:
        w = n
        while w.id != weldid[w.id]:
            w = w.parent
        if not (w.el is not None and battrs[w.id]["mocap"]):
            raise a.error("plane only allowed in static bodies", "type")
    if "fromto" in a:
        if mesh is not None:
            raise a.error("fromto cannot be used with mesh geom", "fromto")
        pos, quat, size = fromto(a, gtype, size, pos)
    else:
        quat = spatial.normvec(ctx.orientation(a))[0]
    surfacevel = np.asarray(a["surfacevel"], dtype=np.float64)
    shell = bool(a["shellinertia"])
    if mesh is not None:
        center = np.zeros(3)
        if gtype != GeomType.MESH:
            size, center = mesh.fit_geom(gtype, size, a["fitscale"], comp.fitaabb)
            dataid = -1
            gmesh = mesh
            mesh = None
        else:
            if shell:
                raise a.error("for mesh geoms, inertia should be specified in the mesh asset",
                              "shellinertia")
            gmesh = mesh
        meshpos = spatial.rotvec(gmesh.quat, center) + gmesh.pos
        pos, quat = spatial.frameaccum(pos, quat, meshpos, gmesh.quat)
        if np.any(surfacevel):
            surfacevel = surfacevel.copy()
            surfacevel[:3] += np.cross(surfacevel[3:], meshpos)
            iq = spatial.negquat(gmesh.quat)
            surfacevel = np.concatenate([spatial.rotvec(iq, surfacevel[:3]),
                                         spatial.rotvec(iq, surfacevel[3:])])
    check_size(a, gtype, size)
    if gtype == GeomType.HFIELD:
        size = np.array([hfield[0], hfield[1], 0.25 * hfield[2] + 0.5 * hfield[3]])
    elif gtype == GeomType.MESH:
        h = np.maximum(np.abs(mesh.aamm[:3]), np.abs(mesh.aamm[3:]))
        size = h.astype(np.float64)
    if np.any(np.isnan(size)):
        raise a.error("nan size in geom", "size")
    infer = (n.id > 0 and (n.inertial is None or comp.inertiafromgeom == "true") and
             comp.inertiagrouprange[0] <= a["group"] <= comp.inertiagrouprange[1])
    gmass, ginertia = 0.0, np.zeros(3)
    if infer:
        if "mass" in a:
            m = float(a["mass"])
            vol = geom_volume(gtype, size, shell, mesh)
            if m == 0:
                gmass = 0.0
            elif vol > spatial.EPS:
                gmass = m
                ginertia = geom_inertia(gtype, size, gmass, shell, mesh)
        else:
            dens = float(a["density"])
            if dens != 0:
                gmass = dens * geom_volume(gtype, size, shell, mesh)
                ginertia = geom_inertia(gtype, size, gmass, shell, mesh)
            if dens < 0:
                raise a.error("mass, inertia or density are negative in geom", "density")
        if gmass < 0 or np.any(ginertia < 0):
            raise a.error("mass, inertia or density are negative in geom")
    fluid = np.zeros(12)
    if a.raw("fluidshape", "none") == "ellipsoid":
        fluid = fluid_coefs(gtype, size, a["fluidcoef"])
    if frame is not None:
        pos, quat = spatial.frameaccum(frame[0], frame[1], pos, quat)
    matid = ctx.lookup(ObjType.MATERIAL, a["material"], el, "material") if "material" in a else -1
    if matid < 0 and gtype == GeomType.MESH and getattr(mesh, "material", None):
        matid = ctx.ids[int(ObjType.MATERIAL)].get(mesh.material, -1)
    G["type"].append(int(gtype))
    G["contype"].append(a["contype"])
    G["conaffinity"].append(a["conaffinity"])
    G["condim"].append(condim)
    G["bodyid"].append(n.id)
    G["dataid"].append(dataid)
    G["matid"].append(matid)
    G["group"].append(a["group"])
    G["priority"].append(a["priority"])
    G["size"].append(size)
    G["aabb"].append(geom_aabb(gtype, size, hfield, mesh))
    G["rbound"].append(geom_rbound(gtype, size, hfield, mesh))
    G["pos"].append(np.asarray(pos, dtype=np.float64))
    G["quat"].append(np.asarray(quat, dtype=np.float64))
    G["friction"].append(a["friction"])
    G["solmix"].append(a["solmix"])
    G["solref"].append(a["solref"])
    G["solimp"].append(a["solimp"])
    G["margin"].append(a["margin"])
    G["gap"].append(a["gap"])
    G["fluid"].append(fluid)
    G["surfacevel"].append(surfacevel)
    G["adhesion"].append(a["adhesion"])
    G["rgba"].append(a["rgba"])
    G["mass"].append(gmass)
    G["inertia"].append(ginertia)
    G["shell"].append(shell)
    G["el"].append(el)
    _user(ctx, a, "user", G["user"])


def _compile_joints(ctx: Ctx, nodes, jnodes) -> dict:
    comp = ctx.compiler
    J = {k: [] for k in ("type", "group", "limited", "actfrclimited", "actgravcomp", "solreflimit",
                         "solimplimit", "solreffriction", "solimpfriction", "pos", "axis",
                         "stiffness", "range", "actfrcrange", "margin", "ref", "springref",
                         "armature", "damping", "frictionloss", "user", "springdamper", "align",
                         "springyield")}
    for _n, (el, frame, cls) in jnodes:
        if el.tag == "freejoint":
            a = ctx.attrs(el, "freejoint", kind="")
            ja = ctx.attrs(el, "joint", kind="")  # MuJoCo's built-in joint defaults only
            ja.given = {}
            jtype = JointType.FREE
            J["align"].append(a.raw("align", "auto"))
            group = a["group"]
        else:
            ja = ctx.attrs(el, "joint", cls)
            jtype = JointType[ja["type"].upper()]
            J["align"].append("auto")
            group = ja["group"]
        sd = np.asarray(ja["springdamper"], float)
        if (sd[0] or sd[1]) and (sd[0] <= 0 or sd[1] <= 0):
            raise ja.error("when defined, springdamper values must be positive", "springdamper")
        rng = np.asarray(ja["range"], float).copy()
        if jtype == JointType.FREE:
            limited = False
            if ja.raw("limited") == "true":
                raise ja.error("limits should not be defined in free joint", "limited")
        else:
            limited = _limited(ja, "limited", rng, comp.autolimits, "joint")
        if limited:
            if rng[0] >= rng[1] and jtype != JointType.BALL:
                raise ja.error("range[0] should be smaller than range[1]", "range")
            if rng[0] and jtype == JointType.BALL:
                raise ja.error("range[0] should be 0 in ball joint", "range")
            if comp.degree and jtype in (JointType.HINGE, JointType.BALL):
                rng = np.array([ctx.angle(r) if r else 0.0 for r in rng])
        afr = np.asarray(ja["actuatorfrcrange"], float)
        if jtype in (JointType.FREE, JointType.BALL):
            actfrclimited = False
        else:
            actfrclimited = _limited(ja, "actuatorfrclimited", afr, comp.autolimits, "joint")
        if actfrclimited and afr[0] >= afr[1]:
            raise ja.error("actfrcrange[0] should be smaller than actfrcrange[1]",
                           "actuatorfrcrange")
        if jtype in (JointType.FREE, JointType.BALL):
            axis = np.array([0.0, 0.0, 1.0])
        else:
            axis = np.asarray(ja["axis"], float)
            if frame is not None:
                axis = spatial.rotvec(frame[1], axis)
        axis, nrm = spatial.normvec(axis)
        if nrm < spatial.EPS:
            raise ja.error("axis too small in joint", "axis")
        if jtype == JointType.FREE:
            pos = np.zeros(3)
        else:
            pos = np.asarray(ja["pos"], float)
            if frame is not None:
                pos = spatial.frameaccum(frame[0], frame[1], pos, [1.0, 0, 0, 0])[0]
        ref, springref = float(ja["ref"]), float(ja["springref"])
        if jtype == JointType.HINGE and comp.degree:
            ref, springref = ctx.angle(ref), ctx.angle(springref)
        springyield = float(ja["springyield"] or 0.0)
        if springyield < 0:
            raise ja.error("springyield cannot be negative in joint", "springyield")
        if springyield > 0 and jtype == JointType.FREE:
            raise ja.error("springyield is not supported on free joints", "springyield")
        if jtype in (JointType.HINGE, JointType.BALL):
            springyield = ctx.angle(springyield)
        J["type"].append(int(jtype))
        J["group"].append(group)
        J["limited"].append(limited)
        J["actfrclimited"].append(actfrclimited)
        J["actgravcomp"].append(bool(ja["actuatorgravcomp"]))
        for k in ("solreflimit", "solimplimit", "solreffriction", "solimpfriction"):
            J[k].append(np.asarray(ja[k], float))
        J["pos"].append(pos)
        J["axis"].append(axis)
        J["stiffness"].append(np.asarray(ja["stiffness"], float))
        J["range"].append(rng)
        J["actfrcrange"].append(afr)
        J["margin"].append(float(ja["margin"]))
        J["ref"].append(ref)
        J["springref"].append(springref)
        J["springyield"].append(springyield)
        J["armature"].append(float(ja["armature"]))
        J["damping"].append(np.asarray(ja["damping"], float))
        J["frictionloss"].append(float(ja["frictionloss"]))
        J["springdamper"].append(sd)
        _user(ctx, ja, "user", J["user"])
    return J


def _compile_sites(ctx: Ctx, sitems) -> dict:
    S = {k: [] for k in ("type", "bodyid", "group", "size", "pos", "quat", "user", "el")}
    for n, (el, frame, cls) in sitems:
        a = ctx.attrs(el, "site", cls)
        stype = GeomType[a["type"].upper()]
        if stype in (GeomType.MESH, GeomType.HFIELD, GeomType.PLANE, GeomType.SDF):
            raise a.error("meshes, hfields and planes not allowed in site", "type")
        size = np.asarray(a["size"], float)
        pos = np.asarray(a["pos"], float)
        if "fromto" in a:
            pos, quat, size = fromto(a, stype, size, pos)
        else:
            quat = ctx.orientation(a)
        if frame is not None:
            pos, quat = spatial.frameaccum(frame[0], frame[1], pos, quat)
        quat = spatial.normvec(quat)[0]
        check_size(a, stype, size)
        S["type"].append(int(stype))
        S["bodyid"].append(n.id)
        S["group"].append(a["group"])
        S["size"].append(size)
        S["pos"].append(pos)
        S["quat"].append(quat)
        S["el"].append(el)
        _user(ctx, a, "user", S["user"])
    return S


def _compile_cameras(ctx: Ctx, citems) -> dict:
    n = len(citems)
    C = {"mode": np.zeros(n, np.int64), "bodyid": np.zeros(n, np.int64),
         "targetbodyid": np.full(n, -1, np.int64), "projection": np.zeros(n, np.int64),
         "resolution": np.ones((n, 2), np.int64), "pos": np.zeros((n, 3)),
         "quat": np.tile([1.0, 0, 0, 0], (n, 1)), "poscom0": np.zeros((n, 3)),
         "pos0": np.zeros((n, 3)), "mat0": np.zeros((n, 9)), "fovy": np.zeros(n),
         "ipd": np.zeros(n), "sensorsize": np.zeros((n, 2)), "intrinsic": np.zeros((n, 4)),
         "user": [], "el": []}
    modes = ["fixed", "track", "trackcom", "targetbody", "targetbodycom"]
    for k, (node, (el, frame, cls)) in enumerate(citems):
        a = ctx.attrs(el, "camera", cls)
        pos, quat = np.asarray(a["pos"], float), ctx.orientation(a)
        if frame is not None:
            pos, quat = spatial.frameaccum(frame[0], frame[1], pos, quat)
        C["pos"][k], C["quat"][k] = pos, spatial.normvec(quat)[0]
        C["mode"][k] = modes.index(a["mode"])
        C["bodyid"][k] = node.id
        if "target" in a:
            C["targetbodyid"][k] = ctx.lookup(ObjType.BODY, a["target"], el, "target")
        C["projection"][k] = 1 if a.raw("projection") == "orthographic" else 0
        C["resolution"][k] = a["resolution"]
        fovy = float(a["fovy"])
        if fovy >= 180:
            raise a.error("fovy too large in camera", "fovy")
        C["ipd"][k] = a["ipd"]
        ss = np.asarray(a["sensorsize"], float) if "sensorsize" in a else np.zeros(2)
        C["sensorsize"][k] = ss.astype(np.float32)  # float in mjModel
        if ss[0] > 0 and ss[1] > 0:
            # the camera spec holds floats: MuJoCo computes these in single precision
            f32 = np.float32
            ss32 = ss.astype(f32)
            dens = np.asarray(a["resolution"], float).astype(f32) / ss32
            spec = {key: (np.asarray(a[key], float) if key in a else np.zeros(2)).astype(f32)
                    for key in ("focal", "focalpixel", "principal", "principalpixel")}
            fl, fp = spec["focal"], spec["focalpixel"]
            pl, pp = spec["principal"], spec["principalpixel"]
            intr = [fp[0] / dens[0] if fp[0] else fl[0], fp[1] / dens[1] if fp[1] else fl[1],
                    pp[0] / dens[0] if pp[0] else pl[0], pp[1] / dens[1] if pp[1] else pl[1]]
            C["intrinsic"][k] = np.asarray(intr, f32)  # float in mjModel
            # std::atan2 of two floats is a float
            fovy = float(np.arctan2(ss32[1] / f32(2), f32(intr[1]))) * 360.0 / math.pi
        else:
            C["intrinsic"][k, :2] = np.float32(ctx.visual_znear)
        C["fovy"][k] = fovy
        C["el"].append(el)
        _user(ctx, a, "user", C["user"])
    return C


def _compile_lights(ctx: Ctx, litems) -> dict:
    n = len(litems)
    L = {"mode": np.zeros(n, np.int64), "bodyid": np.zeros(n, np.int64),
         "targetbodyid": np.full(n, -1, np.int64), "type": np.zeros(n, np.int64),
         "castshadow": np.zeros(n, bool), "active": np.zeros(n, bool), "pos": np.zeros((n, 3)),
         "dir": np.zeros((n, 3)), "poscom0": np.zeros((n, 3)), "pos0": np.zeros((n, 3)),
         "dir0": np.zeros((n, 3))}
    modes = ["fixed", "track", "trackcom", "targetbody", "targetbodycom"]
    types = ["spot", "directional", "point", "image"]
    for k, (node, (el, frame, cls)) in enumerate(litems):
        a = ctx.attrs(el, "light", cls)
        pos, d = np.asarray(a["pos"], float), np.asarray(a["dir"], float)
        if frame is not None:
            pos = spatial.frameaccum(frame[0], frame[1], pos, [1.0, 0, 0, 0])[0]
            d = spatial.rotvec(frame[1], d)
        d, nrm = spatial.normvec(d)
        if nrm < spatial.EPS:
            raise a.error("zero direction in light", "dir")
        L["pos"][k], L["dir"][k] = pos, d
        L["mode"][k] = modes.index(a["mode"])
        L["bodyid"][k] = node.id
        if "target" in a:
            L["targetbodyid"][k] = ctx.lookup(ObjType.BODY, a["target"], el, "target")
        if "type" in a:
            L["type"][k] = types.index(a["type"])
        elif a["directional"]:
            L["type"][k] = 1
        L["castshadow"][k] = a["castshadow"]
        L["active"][k] = a["active"]
    return L


def finalize_simple(ctx: Ctx) -> None:
    """Demotes bodies on the path of tendons with armature, then recounts dof_simplenum."""
    out = ctx.out
    simple = out["body_simple"]
    arm = out.get("tendon_armature", np.zeros(0))
    for t in range(len(arm)):
        if arm[t] == 0:
            continue
        for w in range(out["tendon_adr"][t], out["tendon_adr"][t] + out["tendon_num"][t]):
            obj, wt = out["wrap_objid"][w], out["wrap_type"][w]
            if wt == 3:  # site
                simple[out["site_bodyid"][obj]] = 0
            elif wt in (4, 5):  # sphere, cylinder
                simple[out["geom_bodyid"][obj]] = 0
    count = 0
    nv = out["nv"]
    simplenum = np.zeros(nv, dtype=np.int64)
    for k in range(nv - 1, -1, -1):
        count = count + 1 if simple[out["dof_bodyid"][k]] else 0
        simplenum[k] = count
    out["dof_simplenum"] = simplenum
