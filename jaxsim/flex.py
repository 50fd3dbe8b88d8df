"""Flex objects at run time: vertex positions, edge lengths and Jacobians, edge springs.

MuJoCo: mj_flex (vertex positions, edge lengths and Jacobians) and the flex-edge part of
mj_passive. A flex vertex sits on a body, at the body origin when the flex is centred or
the vertex offset is zero, else at the offset rotated by the body frame. An edge's
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
from jaxsim.types import DisableBit, GeomType, Model, State


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
    flags = m.opt.disableflags
    if flags & (DisableBit.CONSTRAINT | DisableBit.CONTACT):
        return
    for f in range(m.nflex):
        where = m.flex_where[f] if f < len(m.flex_where) else f"flex {f}"
        what = _unsupported(m, f)
        if what is not None:
            raise MJCFError(f"{where}: flex {what} are not supported by jaxsim yet (set "
                            "the flex contype and conaffinity to 0, or disable contacts)")
