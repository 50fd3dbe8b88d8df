"""Distance between two geoms (MuJoCo: mj_geomDistance), for the distance sensors.

Pairs MuJoCo sends to mjc_Convex or mjc_BoxBox are measured with the convex CCD (GJK for
separated geoms, up to `distmax`; EPA for penetrating ones) with no margin, the segment
running between the two witness points. Every other pair calls its collision function
with `distmax` as the margin and takes the contact of smallest distance; the segment is
that contact's point moved half the distance either way along its normal. Distances at
or beyond `distmax` read `distmax` with a zero segment.

Geom ids are static; the result is differentiable in the geoms' poses and sizes.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxsim.collision import ccd, convex
from jaxsim.collision.common import Geom
from jaxsim.types import DisableBit, GeomType, Model, State

_CCD_PAIRS = frozenset(convex._CONVEX_PAIRS) | {(GeomType.BOX, GeomType.BOX)}


def _geoms(m: Model, d: State, g: np.ndarray) -> Geom:
    from jaxsim.collision.driver import _geom_data

    return Geom(d.geom_xpos[g], d.geom_xmat[g], m.geom_size[g], _geom_data(m, g))


def _ccd_distance(m: Model, t1: int, t2: int, g1: Geom, g2: Geom, distmax):
    """mj_geomDistanceCCD: (dist, fromto) of two convex geoms, margin 0, no contacts kept."""
    opt = convex.CCDOptions.of(m.opt)
    dt = g1.pos.dtype
    s1, s2 = jax.tree.map(lax.stop_gradient, (g1, g2))
    zero = jnp.zeros((), dt)
    c = ccd.ccd(convex._geom_pair(t1, s1, t2, s2, zero), lax.stop_gradient(
        jnp.asarray(opt.tolerance, dt)), int(opt.iterations), -jnp.ones(2, jnp.int32),
        lax.stop_gradient(distmax))
    found = c.dist <= distmax
    # gradients: the distance at the frozen separating direction u (from geom 1 to 2) is
    # (s2(-u) - s1(u)).u (envelope theorem), the witness points are the support points
    u = jnp.where(c.dist < 0, c.x1 - c.x2, c.x2 - c.x1)
    u = lax.stop_gradient(ccd.normalize(u))
    w = jnp.asarray(-1, jnp.int32)
    p1 = ccd.support(t1, g1, u, w, False)[0]
    p2 = ccd.support(t2, g2, -u, w, False)[0]
    e = jnp.dot(p2 - p1, u)
    dist = lax.stop_gradient(c.dist) + (e - lax.stop_gradient(e))
    x1 = lax.stop_gradient(c.x1) + (p1 - lax.stop_gradient(p1))
    x2 = lax.stop_gradient(c.x2) + (p2 - lax.stop_gradient(p2))
    fromto = jnp.where(found, jnp.concatenate([x1, x2]), 0.0)
    return jnp.where(found, jnp.minimum(dist, distmax), distmax), fromto


def geom_distances(m: Model, d: State, geom1: np.ndarray, geom2: np.ndarray, distmax):
    """mj_geomDistance for many pairs (static ids): distances (k,) and segments (k, 6) from
    geom1 to geom2, one vectorised call per combination of geom types."""
    from jaxsim.collision.driver import _functions

    dt = d.qpos.dtype
    geom1, geom2 = np.asarray(geom1, np.int64), np.asarray(geom2, np.int64)
    k = len(geom1)
    distmax = jnp.asarray(distmax, dt)
    dist, fromto = jnp.broadcast_to(distmax, (k,)), jnp.zeros((k, 6), dt)
    gt = np.asarray(m.geom_type)
    table = _functions(m)
    native = not int(m.opt.disableflags) & DisableBit.NATIVECCD
    combos = dict.fromkeys(zip(gt[geom1].tolist(), gt[geom2].tolist(), strict=True))
    for ta, tb in combos:
        sel = np.nonzero((gt[geom1] == ta) & (gt[geom2] == tb))[0]
        t1, t2 = min(ta, tb), max(ta, tb)
        if (t1, t2) not in table:
            continue
        g1, g2 = _geoms(m, d, geom1[sel]), _geoms(m, d, geom2[sel])
        if native and (t1, t2) in _CCD_PAIRS:
            fn = lambda a, b, ta=ta, tb=tb: _ccd_distance(m, ta, tb, a, b, distmax)  # noqa: E731
        else:
            fn = lambda a, b, ta=ta, tb=tb, f=table[(t1, t2)][0]: _collide(  # noqa: E731
                f, ta > tb, a, b, distmax)
        dd, ft = jax.vmap(fn)(g1, g2)
        dist, fromto = dist.at[sel].set(dd), fromto.at[sel].set(ft)
    return dist, fromto


def _collide(fn, flip: bool, ga: Geom, gb: Geom, distmax):
    """The contact of smallest distance below distmax from a collision function."""
    res = fn(gb, ga, distmax) if flip else fn(ga, gb, distmax)
    dists = jnp.where(res.valid & (res.dist < distmax), res.dist, jnp.inf)
    i = jnp.argmin(dists)
    found = jnp.isfinite(dists[i])
    dist = jnp.where(found, res.dist[i], distmax)
    half = (-0.5 if flip else 0.5) * dist
    pos, normal = res.pos[i], res.normal[i]
    fromto = jnp.concatenate([pos - half * normal, pos + half * normal])
    return dist, jnp.where(found, fromto, 0.0)


def geom_distance(m: Model, d: State, geom1: int, geom2: int, distmax) -> tuple:
    """Smallest signed distance (below `distmax`) and the segment (6,) from geom1 to geom2.

    MuJoCo: mj_geomDistance. Needs geom_xpos / geom_xmat (kinematics). Pairs without a
    collision function (e.g. two planes) read `distmax` and a zero segment.
    """
    dist, fromto = geom_distances(m, d, np.array([geom1]), np.array([geom2]), distmax)
    return dist[0], fromto[0]


__all__ = ["geom_distance", "geom_distances"]
