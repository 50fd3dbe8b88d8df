"""Closed-form narrow phase for planes, spheres, capsules, cylinders and boxes.

Each public function follows `common`'s interface, `fn(g1, g2, margin) -> Contacts`, and
reproduces the contacts of MuJoCo's analytic colliders (engine_collision_primitive.c and
mjraw_SphereBox in engine_collision_box.c): same number of contacts, same points, normals,
distances and, for plane-capsule, the same tangent. MuJoCo packs the contacts it finds at
the front of its buffer; here every candidate owns a slot and `valid` says which exist
(plane-box and capsule-capsule keep the first ones in MuJoCo's order, as it does).

Where MuJoCo branches on a degenerate value (coincident points, parallel axes, a point on
an axis) both sides are evaluated on finite inputs and the result is chosen with `where`,
so values and gradients stay finite everywhere.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from jaxsim.collision.common import Contacts, Geom, one
from jaxsim.math import MINVAL, norm, normalize, safe_div, safe_sqrt

PLANE, SPHERE, CAPSULE, CYLINDER, BOX = 0, 2, 3, 5, 6

# ----------------------------------------------------------------------------- helpers


def _dot(a, b):
    """3-vector dot product over the last axis, summed in MuJoCo's order (x, y, z)."""
    return a[..., 0] * b[..., 0] + a[..., 1] * b[..., 1] + a[..., 2] * b[..., 2]


def _mat_vec(mat, v):
    """mat @ v, row by row."""
    return jnp.stack([_dot(mat[i], v) for i in range(3)])


def _mat_t_vec(mat, v):
    """mat.T @ v, column by column."""
    return jnp.stack([_dot(mat[:, i], v) for i in range(3)])


def _zaxis(mat):
    return mat[:, 2]


def _first_valid(valid, k: int):
    """Indices of the first k True entries of `valid` (0 where fewer) and their mask."""
    rank = jnp.cumsum(valid.astype(jnp.int32)) - 1
    sel = valid[None, :] & (rank[None, :] == jnp.arange(k)[:, None])
    return jnp.argmax(sel, axis=1), jnp.any(sel, axis=1)


def _gather(c: Contacts, idx, ok) -> Contacts:
    return Contacts(c.dist[idx], c.pos[idx], c.normal[idx], c.tangent[idx], ok)


def _plane_point(n, origin, center, radius, margin):
    """A sphere against the plane through `origin` with unit normal `n`.

    Returns (dist, pos, valid); the normal is `n` (pointing towards the sphere).
    """
    height = _dot(center - origin, n)
    dist = height - radius
    pos = center - n * (0.5 * dist + radius)[..., None]
    return dist, pos, height <= margin + radius


def _sphere_pair(p1, z1, r1, p2, z2, r2, margin):
    """Two spheres (works over leading axes). Returns (dist, pos, normal, valid).

    With coincident centres the normal is the direction of z1 x z2 (x if that vanishes),
    as in MuJoCo, where z1, z2 are the z axes of the two geoms.
    """
    gap = p1 - p2
    valid = _dot(gap, gap) <= jnp.square(margin + r1 + r2)
    dist = safe_sqrt(_dot(gap, gap)) - r1 - r2
    sep = p2 - p1
    together = norm(sep) < MINVAL
    normal = jnp.where(together[..., None], normalize(jnp.cross(z1, z2)), normalize(sep))
    pos = p1 + normal * (r1 + 0.5 * dist)[..., None]
    return dist, pos, normal, valid


# ------------------------------------------------------------------------------ planes


def plane_sphere(g1: Geom, g2: Geom, margin) -> Contacts:
    """Plane (g1) and sphere (g2): one contact below the sphere centre."""
    n = _zaxis(g1.mat)
    dist, pos, valid = _plane_point(n, g1.pos, g2.pos, g2.size[0], margin)
    return one(dist, pos, n, valid)


def plane_capsule(g1: Geom, g2: Geom, margin) -> Contacts:
    """Plane and capsule: one contact per end sphere, tangent along the capsule axis."""
    n = _zaxis(g1.mat)
    axis = _zaxis(g2.mat)
    ends = g2.pos + jnp.array([[1.0], [-1.0]], g2.pos.dtype) * (g2.size[1] * axis)
    dist, pos, valid = _plane_point(n, g1.pos, ends, g2.size[0], margin)
    return Contacts(dist, pos, jnp.broadcast_to(n, (2, 3)), jnp.broadcast_to(axis, (2, 3)),
                    valid)


def plane_cylinder(g1: Geom, g2: Geom, margin) -> Contacts:
    """Plane and cylinder: up to four points on the rim of the cap nearer the plane.

    Slot 0 is the rim point deepest below the plane (no contact at all if it is above the
    margin), slot 1 the same rim point of the other cap, slots 2 and 3 the two rim points
    that form an equilateral triangle with slot 0 on the near cap (both or neither).
    """
    n = _zaxis(g1.mat)
    radius, half = g2.size[0], g2.size[1]
    axis = _zaxis(g2.mat)
    along = _dot(n, axis)
    flip = along > 0
    axis = jnp.where(flip, -axis, axis)  # now points into the plane side
    along = jnp.where(flip, -along, along)
    height = _dot(g2.pos - g1.pos, n)

    # rim direction towards the plane: -n with its axial part removed, scaled to the radius
    radial = axis * along - n
    rsq = _dot(radial, radial)
    tilted = rsq >= MINVAL * MINVAL
    scale = radius / safe_sqrt(jnp.where(tilted, rsq, 1.0))
    radial = jnp.where(tilted, radial * scale, g2.mat[:, 0] * radius)
    drop = _dot(radial, n)

    cap = axis * half
    lift = along * half
    d_near = height + lift + drop
    d_far = height - lift + drop
    d_side = height + lift - 0.5 * drop

    side = normalize(jnp.cross(radial, cap)) * (radius * math.sqrt(3.0) / 2)
    near_rim = g2.pos + cap - 0.5 * radial
    dist = jnp.stack([d_near, d_far, d_side, d_side])
    pts = jnp.stack([g2.pos + radial + cap, g2.pos + radial - cap, near_rim + side,
                     near_rim - side])
    pos = pts - n * (0.5 * dist)[:, None]
    first = d_near <= margin
    valid = first & jnp.stack([True, d_far <= margin, d_side <= margin, d_side <= margin])
    normal = jnp.broadcast_to(n, (4, 3))
    return Contacts(dist, pos, normal, jnp.zeros_like(normal), valid)


def plane_box(g1: Geom, g2: Geom, margin) -> Contacts:
    """Plane and box: the first four corners (in MuJoCo's corner order) that lie on the
    plane side of the box centre and within the margin."""
    n = _zaxis(g1.mat)
    height = _dot(g2.pos - g1.pos, n)
    bits = jnp.array([[(i >> j) & 1 for j in range(3)] for i in range(8)], dtype=bool)
    local = jnp.where(bits, g2.size, -g2.size)  # (8, 3)
    corners = jax.vmap(lambda v: _mat_vec(g2.mat, v))(local)
    depth = _dot(corners, n)
    dist = height + depth
    ok = (dist <= margin) & (depth <= 0)
    pos = g2.pos + corners - n * (0.5 * dist)[:, None]
    normal = jnp.broadcast_to(n, (8, 3))
    cands = Contacts(dist, pos, normal, jnp.zeros_like(normal), ok)
    return _gather(cands, *_first_valid(ok, 4))


# ---------------------------------------------------------------------------- spheres


def sphere_sphere(g1: Geom, g2: Geom, margin) -> Contacts:
    """Two spheres."""
    dist, pos, normal, valid = _sphere_pair(g1.pos, _zaxis(g1.mat), g1.size[0], g2.pos,
                                            _zaxis(g2.mat), g2.size[0], margin)
    return one(dist, pos, normal, valid)


def sphere_capsule(g1: Geom, g2: Geom, margin) -> Contacts:
    """Sphere and capsule: the sphere against the nearest point of the capsule segment."""
    axis = _zaxis(g2.mat)
    half = g2.size[1]
    t = jnp.clip(_dot(axis, g1.pos - g2.pos), -half, half)
    dist, pos, normal, valid = _sphere_pair(g1.pos, _zaxis(g1.mat), g1.size[0],
                                            g2.pos + axis * t, axis, g2.size[0], margin)
    return one(dist, pos, normal, valid)


def sphere_cylinder(g1: Geom, g2: Geom, margin) -> Contacts:
    """Sphere and cylinder: against the side, a cap, or a rim point.

    Outside the cylinder the region of the sphere centre decides; inside, the nearer of
    side and cap wins (the cap only when strictly nearer).
    """
    radius, half = g2.size[0], g2.size[1]
    axis = _zaxis(g2.mat)
    z1 = _zaxis(g1.mat)
    rel = g1.pos - g2.pos
    t = _dot(axis, rel)
    on_axis = axis * t
    off_axis = rel - on_axis
    rsq = _dot(off_axis, off_axis)
    r_off = safe_sqrt(rsq)

    side = jnp.abs(t) < half
    cap = rsq < radius * radius
    cap_nearer = (half - jnp.abs(t)) < (radius - r_off)
    side, cap = side & ~(cap & cap_nearer), cap & ~(side & ~cap_nearer)

    # cap: the sphere against the cap plane, normal reversed (into the cylinder)
    top = t > 0
    cap_n = jnp.where(top, axis, -axis)
    cap_dist, cap_pos, cap_valid = _plane_point(cap_n, g2.pos + cap_n * half, g1.pos,
                                                g1.size[0], margin)

    # side: a sphere of the cylinder's radius on the axis; rim: a point on the rim circle
    # (only used outside side and cap, where r_off >= radius > 0)
    rim_scale = radius / jnp.where(side | cap, 1.0, r_off)
    rim = g2.pos + jnp.where(top, half, -half) * axis + off_axis * rim_scale
    centre = jnp.where(side, g2.pos + on_axis, rim)
    dist, pos, normal, valid = _sphere_pair(g1.pos, z1, g1.size[0], centre, axis,
                                            jnp.where(side, radius, 0.0), margin)

    dist = jnp.where(cap, cap_dist, dist)
    pos = jnp.where(cap, cap_pos, pos)
    normal = jnp.where(cap, -cap_n, normal)
    valid = jnp.where(cap, cap_valid, valid)
    return one(dist, pos, normal, valid)


def sphere_box(g1: Geom, g2: Geom, margin) -> Contacts:
    """Sphere and box, in the box frame: nearest box point, or the nearest face when the
    sphere centre is inside the box."""
    r = g1.size[0]
    size = g2.size
    c = _mat_t_vec(g2.mat, g1.pos - g2.pos)
    clamped = jnp.where(size > 0, jnp.clip(c, -size, size), c)
    gap = clamped - c
    out_n = normalize(gap)
    out_d = norm(gap)
    inside = out_d <= MINVAL

    # outside: midpoint between the nearest box point and the deepest sphere point
    out_pos = 0.5 * clamped + 0.5 * (c + out_n * r)

    # inside: push out through the nearest face (first of -x, +x, -y, +y, -z, +z on ties)
    faces = jnp.stack([-size, size], axis=1).reshape(6)
    depth = jnp.abs(faces - jnp.repeat(c, 2))
    k = jnp.argmin(depth)
    closest = depth[k]
    in_n = jnp.where(jnp.arange(3) == k // 2, jnp.where(k % 2 == 1, -1.0, 1.0), 0.0)
    in_pos = c + in_n * (0.5 * (r - closest))

    local_pos = jnp.where(inside, in_pos, out_pos)
    local_n = jnp.where(inside, in_n, out_n)
    dist = jnp.where(inside, -closest, out_d) - r
    pos = _mat_vec(g2.mat, local_pos) + g2.pos
    return one(dist, pos, _mat_vec(g2.mat, local_n), out_d - r <= margin)


# --------------------------------------------------------------------------- capsules


def capsule_capsule(g1: Geom, g2: Geom, margin) -> Contacts:
    """Two capsules, as sphere pairs between points of their segments (MuJoCo 4).

    Skew axes: one contact at the closest points of the segments. A segment of squared
    length <= mjMINVAL counts as its -1 end, paired with the nearest point of the other
    (one contact, whatever the angle). Axes within 1e-4 rad of parallel (|z1 x z2|^2 <
    1e-8): up to two contacts, the first valid ones of four candidates in MuJoCo's order --
    ends +1 and -1 of segment 1, then ends +1 and -1 of segment 2 -- each paired with its
    nearest point on the other segment; when that point is clamped to an end, the first
    point moves back to the nearest point to it, so overlapping segments touch at the ends
    of their overlap.
    """
    z1, z2 = _zaxis(g1.mat), _zaxis(g2.mat)
    a1 = z1 * g1.size[1]
    a2 = z2 * g2.size[1]
    dif = g1.pos - g2.pos
    aa = _dot(a1, a1)
    ab = -_dot(a1, a2)
    bb = _dot(a2, a2)
    u = -_dot(a1, dif)
    v = _dot(a2, dif)
    det = aa * bb - ab * ab
    skew = jnp.cross(z1, z2)
    # a segment shorter than sqrt(mjMINVAL) is its start point (the -1 end)
    short1 = 4 * aa <= MINVAL
    short2 = 4 * bb <= MINVAL
    general = (_dot(skew, skew) >= 1e-8) & ~short1 & ~short2

    def on1(t):  # unclamped parameter on segment 1 nearest to point t of segment 2
        return safe_div(u - ab * t, aa)

    def on2(s):
        return safe_div(v - ab * s, bb)

    def clip(x):
        return jnp.clip(x, -1.0, 1.0)

    # skew segments: minimiser on segment 1, clamped, then the nearest point of segment 2,
    # clamped, moving the first point back to its nearest point when that clamp acts
    s = clip((bb * u - ab * v) / jnp.where(general, det, 1.0))
    t = on2(s)
    s = jnp.where(t > 1, clip(on1(1.0)), jnp.where(t < -1, clip(on1(-1.0)), s))
    t = clip(t)

    s = jnp.where(short1, -1.0, jnp.where(short2, clip(on1(-1.0)), s))
    t = jnp.where(short2, -1.0, jnp.where(short1, clip(on2(-1.0)), t))
    single = general | short1 | short2

    # (nearly) parallel segments: each end against the other segment
    ends = jnp.array([1.0, -1.0], dtype=aa.dtype)
    t_end = on2(ends)
    s_back = jnp.where(jnp.abs(t_end) > 1, clip(on1(clip(t_end))), ends)
    s_end = on1(ends)
    t_back = jnp.where(jnp.abs(s_end) > 1, clip(on2(clip(s_end))), ends)

    s5 = jnp.concatenate([s_back, clip(s_end), s[None]])
    t5 = jnp.concatenate([clip(t_end), t_back, t[None]])
    dist, pos, normal, ok = _sphere_pair(g1.pos + s5[:, None] * a1, z1, g1.size[0],
                                         g2.pos + t5[:, None] * a2, z2, g2.size[0], margin)
    cands = Contacts(dist, pos, normal, jnp.zeros_like(normal), ok)
    par = _gather(cands, *_first_valid(ok[:4], 2))
    gen = _gather(cands, jnp.array([4, 4]), jnp.stack([ok[4], False]))
    return jax.tree_util.tree_map(lambda g, p: jnp.where(single, g, p), gen, par)


FUNCTIONS = {
    (PLANE, SPHERE): (plane_sphere, 1),
    (PLANE, CAPSULE): (plane_capsule, 2),
    (PLANE, CYLINDER): (plane_cylinder, 4),
    (PLANE, BOX): (plane_box, 4),
    (SPHERE, SPHERE): (sphere_sphere, 1),
    (SPHERE, CAPSULE): (sphere_capsule, 1),
    (SPHERE, CYLINDER): (sphere_cylinder, 1),
    (SPHERE, BOX): (sphere_box, 1),
    (CAPSULE, CAPSULE): (capsule_capsule, 2),
}
