"""What every narrow-phase collision function takes and returns.

A collision function handles ONE geom pair and is written unbatched; the driver groups
the candidate pairs by function and `vmap`s it over each group. Its signature is

    fn(g1: Geom, g2: Geom, margin) -> Contacts          (K slots, K fixed per function)

with `g1.type <= g2.type` (MuJoCo's order: the normal points from geom 1 to geom 2,
`pos` is the midpoint between the two surfaces, `dist` is negative in penetration).
`margin` is MuJoCo's margin + gap of the pair: a contact exists where MuJoCo's function
reports one (in practice `dist <= margin`, with each function's own tie rules). Slots
without a contact are marked by `valid == False` and hold finite numbers (so gradients
through `jnp.where` stay finite); never NaN, never a sentinel in place of the mask.

Geom types follow MuJoCo's mjtGeom: PLANE 0, HFIELD 1, SPHERE 2, CAPSULE 3, ELLIPSOID 4,
CYLINDER 5, BOX 6, MESH 7.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp


class Geom(NamedTuple):
    """One geom in world coordinates (the driver fills it from the state)."""

    pos: jax.Array  # (3,) geom_xpos
    mat: jax.Array  # (3, 3) geom_xmat: mat @ local = world, columns are the local axes
    size: jax.Array  # (3,) geom_size
    # Type-specific static-shaped data, gathered by the driver: `None` for primitives,
    # a ccd.MeshData for meshes, an hfield.HFieldData for height fields.
    data: Any = None


class Contacts(NamedTuple):
    """Up to K contacts of one geom pair."""

    dist: jax.Array  # (K,)
    pos: jax.Array  # (K, 3)
    normal: jax.Array  # (K, 3) unit, from geom 1 to geom 2 (first row of the frame)
    tangent: jax.Array  # (K, 3) MuJoCo's optional second frame axis; zeros if unset
    valid: jax.Array  # (K,) bool
    overflow: jax.Array | None = None  # () bool: more contacts than K (None: cannot be)

    @staticmethod
    def concat(items: list[Contacts]) -> Contacts:
        """Concatenates results along the slot axis (K = sum of the parts' K)."""
        over = [c.overflow for c in items if c.overflow is not None]
        return Contacts(*(jnp.concatenate(xs, axis=0) for xs in zip(*(c[:5] for c in items),
                                                                    strict=True)),
                        overflow=jnp.any(jnp.stack(over)) if over else None)


def one(dist, pos, normal, valid, tangent=None) -> Contacts:
    """A single-slot result (K = 1)."""
    dist = jnp.asarray(dist)
    tangent = jnp.zeros_like(pos) if tangent is None else tangent
    return Contacts(dist[None], pos[None], normal[None], tangent[None],
                    jnp.asarray(valid)[None])


def _dot(a: jax.Array, b: jax.Array) -> jax.Array:
    """Dot product of 3-vectors as multiply-adds (vmapped, a jnp.dot becomes a tiny
    reduction kernel of its own on the CPU)."""
    return a[..., 0] * b[..., 0] + a[..., 1] * b[..., 1] + a[..., 2] * b[..., 2]


def make_frame(normal: jax.Array, tangent: jax.Array) -> jax.Array:
    """MuJoCo's mju_makeFrame: rows (normal, tangent, normal x tangent).

    If `tangent` is (close to) zero, the second axis starts from (0, 1, 0), or (0, 0, 1)
    when the normal is close to the y axis; it is then made orthogonal to the normal
    (and becomes the x axis if nothing is left, as mju_normalize3 does).
    """
    n = normal / jnp.sqrt(jnp.maximum(_dot(normal, normal), 1e-30))
    unset = _dot(tangent, tangent) < 0.25
    alt = jnp.where((n[1] < 0.5) & (n[1] > -0.5), jnp.array([0.0, 1.0, 0.0], n.dtype),
                    jnp.array([0.0, 0.0, 1.0], n.dtype))
    t = jnp.where(unset, alt, tangent)
    t = t - n * _dot(n, t)
    # MuJoCo's normalize maps a (near) zero vector to the x axis
    tt = _dot(t, t)
    small = tt < 1e-30
    t = jnp.where(small, jnp.array([1.0, 0.0, 0.0], n.dtype),
                  t / jnp.sqrt(jnp.where(small, 1.0, tt)))
    return jnp.stack([n, t, jnp.cross(n, t)])


def contact_bodies(m, c) -> jax.Array:
    """(ncon, 2) body of each side of each contact: the geom's body; for a flex vertex the
    body carrying it; for a flex element the body of its first vertex (MuJoCo:
    mj_flexBody, the representative body sensors and sleeping use; the Jacobian of an
    element side spreads over all its vertices)."""
    import numpy as np

    if m.ngeom:
        gb = jnp.asarray(np.asarray(m.geom_bodyid, np.int32))
        body = gb[jnp.clip(c.geom, 0, m.ngeom - 1)]
    else:
        body = jnp.zeros(c.geom.shape, jnp.int32)
    if not m.nflex:
        return body
    vb = jnp.asarray(np.asarray(m.flex_vertbodyid, np.int32))
    va = jnp.asarray(np.asarray(m.flex_vertadr, np.int32))
    ea = jnp.asarray(np.asarray(m.flex_elemadr, np.int32))
    f = jnp.clip(c.flex, 0, m.nflex - 1)
    first = jnp.asarray(np.asarray(m.flex_elem, np.int32)[:, 0])
    e = jnp.clip(ea[f] + jnp.maximum(c.elem, 0), 0, max(m.nflexelem - 1, 0))
    local = jnp.where(c.vert >= 0, c.vert, first[e])
    v = jnp.clip(va[f] + jnp.maximum(local, 0), 0, max(m.nflexvert - 1, 0))
    return jnp.where(c.geom >= 0, body, vb[v])
