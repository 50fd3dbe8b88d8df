"""Flex objects at run time: vertex positions, edge lengths and Jacobians, edge springs.

MuJoCo: mj_flex (vertex positions, edge lengths and Jacobians) and the flex-edge part of
mj_passive. A flex vertex sits on a body, at the body origin when the flex is centred or
the vertex offset is zero, else at the offset rotated by the body frame. An edge's
Jacobian is its unit direction times the difference of the end points' translational
Jacobians.

Flex edge equality rows (mjEQ_FLEX) are built with the other equality rows in
`jaxsim.constraint`. Not implemented (refused by `check_supported` when the forward pass
would need them): contacts of flexes with geoms, with other flexes or with themselves.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jaxsim import math
from jaxsim.mjcf.errors import MJCFError
from jaxsim.types import DisableBit, Model, State


def _np(x) -> np.ndarray:
    return np.asarray(x)


def vertex_xpos(m: Model, d: State) -> jax.Array:
    """(nflexvert, 3) global vertex positions."""
    body = _np(m.flex_vertbodyid)
    fid = np.repeat(np.arange(m.nflex), _np(m.flex_vertnum))
    centered = _np(m.flex_centered).astype(bool)[fid]
    off = jnp.where(jnp.asarray(centered)[:, None], 0.0, m.flex_vert)
    return d.xpos[body] + jnp.einsum("kij,kj->ki", d.xmat[body], off)


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


def _collides(m: Model, f: int) -> bool:
    """Whether flex f can touch any geom or itself (MuJoCo's contype/conaffinity rule)."""
    ct, ca = int(m.flex_contype[f]), int(m.flex_conaffinity[f])
    gct, gca = _np(m.geom_contype), _np(m.geom_conaffinity)
    with_geom = bool(np.any((ct & gca) | (gct & ca)))
    self_ = (ct & ca) and int(m.flex_selfcollide[f])
    return with_geom or bool(self_) or bool(m.nflex > 1 and any(
        (ct & int(m.flex_conaffinity[g])) or (int(m.flex_contype[g]) & ca)
        for g in range(m.nflex) if g != f))


def check_supported(m: Model) -> None:
    """Raises (at trace time) when the forward pass would need flex physics jaxsim lacks."""
    if not m.nflex:
        return
    flags = m.opt.disableflags
    if flags & DisableBit.CONSTRAINT:
        return
    for f in range(m.nflex):
        where = m.flex_where[f] if f < len(m.flex_where) else f"flex {f}"
        if not flags & DisableBit.CONTACT and _collides(m, f):
            raise MJCFError(f"{where}: flex collisions are not supported by jaxsim yet (set "
                            "the flex contype and conaffinity to 0, or disable contacts)")
