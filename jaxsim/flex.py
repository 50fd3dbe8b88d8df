"""Flex objects at run time: vertex positions, edge lengths and Jacobians, edge springs,
elasticity.

MuJoCo: mj_flex (vertex positions, edge lengths and Jacobians) and the flex parts of
mj_passive (edge spring-dampers; stretch and bending elasticity, `elasticity`). A flex
vertex sits on a body, at the body origin when the flex is centred or the vertex offset is
zero, else at the offset rotated by the body frame. An edge's
Jacobian is its unit direction times the difference of the end points' translational
Jacobians.

Flex edge equality rows (mjEQ_FLEX) are built with the other equality rows in
`jaxsim.constraint`; flex contacts in `jaxsim.collision.flexcol`. Not implemented (refused
by `check_supported` when the forward pass would need them, naming the flex): collisions of
tetrahedra with spheres and capsules, of any element with a height field, and of two
flexes with each other.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jaxsim import math
from jaxsim.mjcf.errors import MJCFError
from jaxsim.mjcf.flex import ELEM_EDGES
from jaxsim.types import Cone, DisableBit, EnableBit, GeomType, Integrator, Model, Solver, State


def _np(x) -> np.ndarray:
    return np.asarray(x)


def vertex_xpos(m: Model, d: State) -> jax.Array:
    """(nflexvert, 3) global vertex positions."""
    body = _np(m.flex_vertbodyid)
    fid = np.repeat(np.arange(m.nflex), _np(m.flex_vertnum))
    centered = _np(m.flex_centered).astype(bool)[fid]
    off = jnp.where(jnp.asarray(centered)[:, None], 0.0, m.flex_vert)
    mat = d.xmat[body]
    # mju_mulMatVec3's order of operations, then the body position (rounding as MuJoCo)
    rot = mat[:, :, 0] * off[:, None, 0] + mat[:, :, 1] * off[:, None, 1] + mat[:, :, 2] * off[
        :, None, 2]
    return rot + d.xpos[body]


def edge_vertices(m: Model, ids: np.ndarray | None = None) -> np.ndarray:
    """(k, 2) global vertex ids of the ends of the flex edges `ids` (default: all)."""
    ids = np.arange(m.nflexedge) if ids is None else np.asarray(ids)
    fid = np.repeat(np.arange(m.nflex), _np(m.flex_edgenum))[ids]
    return _np(m.flex_vertadr)[fid][:, None] + _np(m.flex_edge).reshape(-1, 2)[ids]


def edges(m: Model, d: State, ids: np.ndarray | None = None) -> tuple[jax.Array, jax.Array]:
    """(length, Jacobian (k, nv)) of the flex edges `ids` (default: all)."""
    from jaxsim import smooth

    dt = d.qpos.dtype
    ids = np.arange(m.nflexedge) if ids is None else np.asarray(ids)
    if not len(ids):
        return jnp.zeros(0, dt), jnp.zeros((0, m.nv), dt)
    v1, v2 = edge_vertices(m, ids).T
    xpos = vertex_xpos(m, d)
    p1, p2 = xpos[v1], xpos[v2]
    vec, length = math.normalize_with_norm(p2 - p1)
    body = _np(m.flex_vertbodyid)
    j1, _ = smooth.jac(m, d, p1, body[v1])
    j2, _ = smooth.jac(m, d, p2, body[v2])
    J = jnp.einsum("ki,kiv->kv", vec, j2 - j1)
    return length, J


def passive(m: Model, d: State, spring: bool, damper: bool) -> tuple[jax.Array, jax.Array]:
    """(qfrc_spring, qfrc_damper) contributions of the flex edge spring-dampers."""
    dt = d.qpos.dtype
    zero = jnp.zeros(m.nv, dt)
    if not m.nflexedge:
        return zero, zero
    fid = np.repeat(np.arange(m.nflex), _np(m.flex_edgenum))
    # only edges of flexes compiled with a spring or damper (no Jacobians for the others)
    ids = np.nonzero(~_np(m.flex_rigid).astype(bool)[fid] & ~_np(m.flexedge_rigid).astype(bool)
                     & _np(m.flex_haspassive).astype(bool)[fid])[0]
    if not len(ids):
        return zero, zero
    length, J = edges(m, d, ids)
    k = m.flex_edgestiffness[fid[ids]] if spring else jnp.zeros(len(ids), dt)
    b = m.flex_edgedamping[fid[ids]] if damper else jnp.zeros(len(ids), dt)
    fs = k * (m.flexedge_length0[ids] - length)
    fd = -b * (J @ d.qvel)
    return fs @ J, fd @ J


def _metric_index(ne: int) -> np.ndarray:
    """(ne, ne) positions in the 21 stored entries of a symmetric ne x ne edge metric."""
    idx = np.zeros((ne, ne), np.int64)
    iu = np.triu_indices(ne)
    idx[iu] = np.arange(len(iu[0]))
    idx[iu[1], iu[0]] = np.arange(len(iu[0]))
    return idx


def _vertex_velocity(m: Model, d: State, xpos: jax.Array) -> jax.Array:
    """(nflexvert, 3) global linear velocities of the flex vertices (from cvel)."""
    body = _np(m.flex_vertbodyid)
    cvel = d.cvel[body]
    return cvel[:, 3:] + jnp.cross(cvel[:, :3], xpos - d.subtree_com[_np(m.body_rootid)[body]])


def _stretch_forces(m: Model, d: State, f: int, xpos, vvel) -> jax.Array:
    """Spring and damper forces (each (nvert of flex f, 3), global, per vertex) of the
    flex's stretch elasticity: per element, -sum_f (elongation_e K[e, f]) d(l_f^2)/dx, with
    the elongation l^2 - l0^2 for the spring and, for the Rayleigh damper, damping /
    timestep times the change of l^2 over the last step (from the edge velocity).
    MuJoCo: mj_flexPassiveStretch (4.0 books the two parts apart)."""
    dim = int(m.flex_dim[f])
    vadr, nvert = int(m.flex_vertadr[f]), int(m.flex_vertnum[f])
    eadr, num = int(m.flex_elemadr[f]), int(m.flex_elemnum[f])
    ed0, ednum = int(m.flex_edgeadr[f]), int(m.flex_edgenum[f])
    table = np.asarray(ELEM_EDGES[dim])
    ne = len(table)
    elem = _np(m.flex_elem)[eadr:eadr + num, :dim + 1]
    eedge = _np(m.flex_elemedge)[eadr:eadr + num, :ne]  # local edge ids
    va, vb = elem[:, table[:, 0]], elem[:, table[:, 1]]  # (num, ne)
    x = xpos[vadr:vadr + nvert]
    # per edge of the flex once (length, velocity along it), then per element edge
    ends = edge_vertices(m, np.arange(ed0, ed0 + ednum))
    vec = xpos[ends[:, 1]] - xpos[ends[:, 0]]
    length = math.norm(vec)
    speed = jnp.sum(vec * (vvel[ends[:, 1]] - vvel[ends[:, 0]]), -1) / jnp.where(
        length > 0, length, 1.0)
    dt = m.opt.timestep
    kd = jnp.where(dt > 0, m.flex_damping[f] / jnp.where(dt > 0, dt, 1.0), 0.0)
    sq = (length * length)[eedge]
    prev = (length - speed * dt)[eedge]
    l0 = m.flexedge_length0[ed0 + eedge]
    metric = m.flex_stiffness[eadr:eadr + num][:, _metric_index(ne)]  # (num, ne, ne)
    grad = x[va] - x[vb]  # (num, ne, 3)

    def forces(elong):
        s = jnp.einsum("te,tef->tf", elong, metric)
        g = (s[..., None] * grad).reshape(-1, 3)
        frc = jnp.zeros((nvert, 3), xpos.dtype)
        return frc.at[va.reshape(-1)].add(-g).at[vb.reshape(-1)].add(g)

    return forces(sq - l0 * l0), forces((sq - prev * prev) * kd)


def _bend_forces(m: Model, d: State, f: int, xpos, spring: bool, damper: bool):
    """(vertex ids (k, 4), spring forces (k, 4, 3), damper forces (k, 4, 3)) of the bending
    elasticity of flex f, over its interior edges: the edge's vertices and flaps times the
    4 x 4 bending matrix, plus the curved-reference coefficient times the gradient of the
    volume they span; the damper acts on the vertices' dof velocities. MuJoCo:
    mj_flexPassiveBend."""
    vadr = int(m.flex_vertadr[f])
    eadr, num = int(m.flex_edgeadr[f]), int(m.flex_edgenum[f])
    flap = _np(m.flex_edgeflap)[eadr:eadr + num]
    inner = np.nonzero(flap[:, 1] >= 0)[0]
    ids = vadr + np.concatenate([_np(m.flex_edge)[eadr + inner], flap[inner]], -1)  # (k, 4)
    b = m.flex_bending[eadr + inner]
    bmat = b[:, :16].reshape(-1, 4, 4)
    x = xpos[ids]
    ed = x[:, 1:] - x[:, :1]
    f1 = jnp.cross(ed[:, 1], ed[:, 2])
    f2 = jnp.cross(ed[:, 2], ed[:, 0])
    f3 = jnp.cross(ed[:, 0], ed[:, 1])
    grad = jnp.stack([-(f1 + f2 + f3), f1, f2, f3], 1)
    zero = jnp.zeros_like(x)
    fs = jnp.einsum("kij,kjx->kix", bmat, x) + b[:, 16, None, None] * grad if spring else zero
    fd = zero
    if damper:
        # MuJoCo takes a free vertex's three dof velocities as its world velocity
        body = _np(m.flex_vertbodyid)[ids]
        free = _np(m.body_dofnum)[body] == 3
        dof = np.where(free, _np(m.body_dofadr)[body], 0)[..., None] + np.arange(3)
        vel = jnp.where(jnp.asarray(free)[..., None], d.qvel[dof], 0.0)
        fd = jnp.einsum("kij,kjx->kix", bmat, vel) * m.flex_damping[f]
    return ids, fs, fd


def elasticity(m: Model, d: State, spring: bool, damper: bool) -> tuple[jax.Array, jax.Array]:
    """(qfrc_spring, qfrc_damper) of the flexes' elasticity (stretch and bending).

    MuJoCo: the flex part of mj_springdamper. A vertex on a body that only slides along its
    axes gets its force rotated into the body frame, any other through its point Jacobian
    (mj_applyFT). Bending forces act on vertices whose body has three dofs only (the
    others are pinned), on those dofs, rotated into the body frame.
    """
    from jaxsim import passive

    dt = d.qpos.dtype
    zero = jnp.zeros(m.nv, dt)
    flexes = [f for f in range(m.nflex)
              if (_np(m.flex_stretch)[f] or _np(m.flex_bend)[f]) and not _np(m.flex_rigid)[f]
              and int(m.flex_dim[f]) > 1]
    if not flexes or not m.nv:
        return zero, zero
    xpos = vertex_xpos(m, d)
    body = _np(m.flex_vertbodyid)
    dofnum, dofadr = _np(m.body_dofnum), _np(m.body_dofadr)
    frc = jnp.zeros((m.nflexvert, 3), dt)  # stretch: global forces per vertex
    frc_d = jnp.zeros((m.nflexvert, 3), dt)
    bend_s = jnp.zeros((m.nflexvert, 3), dt)
    bend_d = jnp.zeros((m.nflexvert, 3), dt)
    vvel = None
    for f in flexes:
        vadr, nvert = int(m.flex_vertadr[f]), int(m.flex_vertnum[f])
        if _np(m.flex_stretch)[f]:
            if vvel is None:
                vvel = _vertex_velocity(m, d, xpos)
            fs, fd = _stretch_forces(m, d, f, xpos, vvel)
            if spring:
                frc = frc.at[vadr:vadr + nvert].add(fs)
            if damper:
                frc_d = frc_d.at[vadr:vadr + nvert].add(fd)
        if _np(m.flex_bend)[f] and (spring or damper):
            ids, fs, fd = _bend_forces(m, d, f, xpos, spring, damper)
            bend_s = bend_s.at[ids.reshape(-1)].add(fs.reshape(-1, 3))
            bend_d = bend_d.at[ids.reshape(-1)].add(fd.reshape(-1, 3))
    qs, qd = zero, zero
    simple = _np(m.body_simple)[body] == 2
    slide = np.nonzero(simple)[0]
    other = np.nonzero(~simple)[0]
    mat = d.xmat[body]

    def generalized(frc):
        q = zero
        if len(slide):
            loc = jnp.einsum("kji,kj->ki", mat[slide], frc[slide])
            n = dofnum[body[slide]]
            cols = dofadr[body[slide]][:, None] + np.arange(3)
            keep = np.arange(3)[None, :] < n[:, None]
            q = q.at[np.where(keep, cols, 0)].add(jnp.where(jnp.asarray(keep), loc, 0.0))
        if len(other):
            q = q + passive.apply_ft(m, d, frc[other], jnp.zeros_like(frc[other]),
                                     xpos[other], body[other])
        return q

    if any(_np(m.flex_stretch)[f] for f in flexes):
        qs, qd = generalized(frc), generalized(frc_d)
    free = np.nonzero(dofnum[body] == 3)[0]
    if len(free):
        cols = dofadr[body[free]][:, None] + np.arange(3)
        qs = qs.at[cols].add(-jnp.einsum("kji,kj->ki", mat[free], bend_s[free]))
        qd = qd.at[cols].add(-jnp.einsum("kji,kj->ki", mat[free], bend_d[free]))
    return qs, qd


def self_pairs(m: Model, f: int) -> np.ndarray:
    """(k, 2) element pairs of flex f that MuJoCo tests for self-collision: both elements
    active (3D: in the first flex_activelayers layers), no vertex body in common; empty
    when the flex cannot self-collide (rigid, contype & conaffinity zero, selfcollide
    none)."""
    if (_np(m.flex_rigid)[f] or not (int(m.flex_contype[f]) & int(m.flex_conaffinity[f]))
            or not int(m.flex_selfcollide[f])):
        return np.zeros((0, 2), np.int64)
    dim = int(m.flex_dim[f])
    adr, num = int(m.flex_elemadr[f]), int(m.flex_elemnum[f])
    elem = _np(m.flex_elem)[adr:adr + num, :dim + 1]
    body = _np(m.flex_vertbodyid)[int(m.flex_vertadr[f]):][elem]  # (num, dim + 1)
    active = np.ones(num, bool)
    if dim == 3:
        active = _np(m.flex_elemlayer)[adr:adr + num] < int(m.flex_activelayers[f])
    a, b = np.triu_indices(num, 1)
    ok = active[a] & active[b]
    share = np.any(body[a][:, :, None] == body[b][:, None, :], axis=(1, 2))
    ok &= ~share
    return np.stack([a[ok], b[ok]], -1)


# jaxsim enumerates flex element pairs at compile time (no run-time midphase for flexes yet)
ELEM_PAIRS_MAX = 100_000


def _unsupported(m: Model, f: int) -> str | None:
    """What flex f would need from the collision pipeline that jaxsim lacks, or None."""
    from jaxsim.collision import flexcol

    g, fl = flexcol.geom_flex_pairs(m)
    gtype = _np(m.geom_type)
    from jaxsim.collision.flexcol import _SLOTS

    for gg in g[fl == f]:
        t = int(gtype[gg])
        if t != GeomType.PLANE and t not in _SLOTS[int(m.flex_dim[f])]:
            return (f"(dim {int(m.flex_dim[f])}) collisions with geom {int(gg)} "
                    f"({GeomType(t).name.lower()})")
    ct, ca = int(m.flex_contype[f]), int(m.flex_conaffinity[f])
    for o in range(m.nflex):
        if o != f and ((ct & int(m.flex_conaffinity[o])) or (int(m.flex_contype[o]) & ca)):
            return f"collisions with flex {o}"
    npair = len(self_pairs(m, f))
    if npair > ELEM_PAIRS_MAX:
        return (f"self-collisions over {npair} element pairs (more than {ELEM_PAIRS_MAX}; set "
                "selfcollide to none)")
    return None


def check_supported(m: Model) -> None:
    """Raises (at trace time) when the forward pass would need flex physics jaxsim lacks."""
    if not m.nflex:
        return
    elastic = [f for f in range(m.nflex) if not _np(m.flex_rigid)[f]
               and (_np(m.flex_stretch)[f] or _np(m.flex_bend)[f])]
    o = m.opt
    if (elastic and o.solver == Solver.CG and o.cone == Cone.PYRAMIDAL
            and o.integrator in (Integrator.IMPLICIT, Integrator.IMPLICITFAST)
            and not o.enableflags & EnableBit.SLEEP):
        where = m.flex_where[elastic[0]] if elastic[0] < len(m.flex_where) else "a flex"
        raise MJCFError(f"{where}: flex elasticity with the CG solver and an implicit "
                        "integrator (MuJoCo then folds the flex stiffness into its solver) is "
                        "not supported by jaxsim yet; use the Newton solver or the Euler or "
                        "RK4 integrator")
    flags = m.opt.disableflags
    if flags & (DisableBit.CONSTRAINT | DisableBit.CONTACT):
        return
    for f in range(m.nflex):
        where = m.flex_where[f] if f < len(m.flex_where) else f"flex {f}"
        what = _unsupported(m, f)
        if what is not None:
            raise MJCFError(f"{where}: flex {what} are not supported by jaxsim yet (set "
                            "the flex contype and conaffinity to 0, or disable contacts)")
