"""The exact convex contact of a triangular prism (a cell half of a height field) with a
sphere, capsule, ellipsoid, cylinder, box or mesh, in the height field's frame: the
candidate directions of each geom type in closed form (`_candidates`), the search for
the signed distance over them (`_search`), its evaluation along a frozen normal with the
witness point (`_evaluate`), and the small written-out helpers they share. See
`jaxsim.collision.hfield` for how a pair's prisms are scanned."""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxsim.types import GeomType

SPHERE, CAPSULE = int(GeomType.SPHERE), int(GeomType.CAPSULE)
ELLIPSOID, CYLINDER = int(GeomType.ELLIPSOID), int(GeomType.CYLINDER)
BOX, MESH = int(GeomType.BOX), int(GeomType.MESH)

def _tiny(dt, power=1.0):
    """Smallest normal number of dtype dt, to a power (1/3: its cube stays normal)."""
    return float(np.finfo(dt).tiny) ** power


# prism vertices: 0-2 bottom, 3-5 top (same order); its edges
_EDGES = np.array([[0, 1], [1, 2], [2, 0], [3, 4], [4, 5], [5, 3], [0, 3], [1, 4], [2, 5]])

# ------------------------------------------------------------------------ small helpers


def _sum(x):
    """Sum over a short last axis, written out: XLA:CPU hands short reductions and products
    to a library (YNNPACK) whose calls cost far more than the arithmetic here (the MJX
    barkour at batch 1024: the three largest took 33 of the collider's 62 ms per step;
    docs/performance.md)."""
    if x.shape[-1] > 8:
        return jnp.sum(x, -1)
    out = x[..., 0]
    for i in range(1, x.shape[-1]):
        out = out + x[..., i]
    return out


def _max(x):
    """Maximum over a short last axis, written out (see _sum)."""
    if x.shape[-1] > 16:
        return jnp.max(x, -1)
    out = x[..., 0]
    for i in range(1, x.shape[-1]):
        out = jnp.maximum(out, x[..., i])
    return out


def _min(x):
    """Minimum over a short last axis, written out (see _sum)."""
    return -_max(-x)


def _mv(x, m):
    """x (..., k) @ m (k, n) for a short k, written out (see _sum)."""
    out = x[..., 0, None] * m[0]
    for i in range(1, m.shape[0]):
        out = out + x[..., i, None] * m[i]
    return out


def _dots(a, b):
    """a (..., A, 3) . b (..., B, 3) -> (..., A, B), written out (see _sum)."""
    return _sum(a[..., :, None, :] * b[..., None, :, :])


def _dot(a, b):
    return _sum(a * b)


def _len(v):
    """|v| along the last axis, with finite gradients at 0."""
    return jnp.sqrt(jnp.maximum(_sum(v * v), _tiny(v.dtype)))


def _unit(v):
    """v / |v| along the last axis; (0, 0, 1) (or (1, 0)) for a zero vector."""
    n2 = _sum(v * v)[..., None]
    ok = n2 > _tiny(v.dtype)
    alt = jnp.zeros(v.shape[-1], v.dtype).at[-1].set(1.0)
    return jnp.where(ok, v / jnp.sqrt(jnp.where(ok, n2, 1.0)), alt)


def _perp(v, e):
    """Component of v orthogonal to the unit vector e (broadcast)."""
    return v - _dot(v, e)[..., None] * e


def _both(n):
    return jnp.concatenate([n, -n], 0)


class _G(NamedTuple):
    """The other geom in the height field's frame."""

    pos: jax.Array
    mat: jax.Array  # columns: its axes
    size: jax.Array
    vert: jax.Array | None  # mesh vertices (local), else None


def _hsup(t: int, g: _G, m):
    """Support function h_G(m) = max over G of x . m for directions m (..., 3)."""
    base = _dot(m, g.pos)
    lm = _mv(m, g.mat)
    s = g.size
    if t == SPHERE:
        return base + s[0] * _len(m)
    if t == CAPSULE:
        return base + s[0] * _len(m) + s[1] * jnp.abs(lm[..., 2])
    if t == ELLIPSOID:
        return base + _len(lm * s)
    if t == CYLINDER:
        return base + s[0] * _len(lm[..., :2]) + s[1] * jnp.abs(lm[..., 2])
    if t == BOX:
        return base + _sum(s * jnp.abs(lm))
    return base + jnp.max(lm @ g.vert.T, -1)


def _spoint(t: int, g: _G, m):
    """A support point of G in unit direction m (3,)."""
    lm = g.mat.T @ m
    s = g.size
    if t == SPHERE:
        loc = s[0] * lm
    elif t == CAPSULE:
        loc = s[0] * lm + jnp.array([0.0, 0.0, 1.0], m.dtype) * jnp.where(lm[2] >= 0, s[1],
                                                                         -s[1])
    elif t == ELLIPSOID:
        q = lm * s
        loc = q * s / _len(q)
    elif t == CYLINDER:
        r2 = lm[0] * lm[0] + lm[1] * lm[1]
        ok = r2 > 1e-30
        scl = jnp.where(ok, s[0] / jnp.sqrt(jnp.where(ok, r2, 1.0)), 0.0)
        loc = jnp.stack([scl * lm[0], scl * lm[1], jnp.where(lm[2] >= 0, s[1], -s[1])])
    elif t == BOX:
        loc = jnp.where(lm >= 0, s, -s)
    else:
        loc = g.vert[jnp.argmax(g.vert @ lm)]
    return g.pos + g.mat @ loc


def _rbound(t: int, size, vert):
    if t == SPHERE:
        return size[0]
    if t == CAPSULE:
        return size[0] + size[1]
    if t == ELLIPSOID:
        return jnp.max(size)
    if t == CYLINDER:
        return jnp.sqrt(size[0] * size[0] + size[1] * size[1])
    if t == BOX:
        return jnp.sqrt(jnp.sum(size * size))
    return jnp.max(_len(vert))


def _seg_closest(p0, p1, q0, q1):
    """Closest points of segments [p0, p1] and [q0, q1] (finite gradients throughout)."""
    d1, d2, r = p1 - p0, q1 - q0, p0 - q0
    a, e, f = _dot(d1, d1), _dot(d2, d2), _dot(d2, r)
    c, b = _dot(d1, r), _dot(d1, d2)
    eps = 1e-30
    ok_a, ok_e = a > eps, e > eps
    a1, e1 = jnp.where(ok_a, a, 1.0), jnp.where(ok_e, e, 1.0)
    den = a * e - b * b
    ok = ok_a & ok_e & (den > 1e-14 * a1 * e1)
    s = jnp.where(ok, jnp.clip((b * f - c * e) / jnp.where(ok, den, 1.0), 0.0, 1.0), 0.0)
    t = jnp.clip(jnp.where(ok_e, (b * s + f) / e1, 0.0), 0.0, 1.0)
    s = jnp.where(ok_a, jnp.clip((b * t - c) / a1, 0.0, 1.0), 0.0)
    return p0 + s * d1, q0 + t * d2


# ----------------------------------------------------------------- candidate directions


def _prism_faces(v):
    """Outward unit normals of the prism's faces (top, bottom, three sides)."""
    top = jnp.cross(v[4] - v[3], v[5] - v[3])
    top = top * jnp.where(top[2] < 0, -1.0, 1.0)
    bottom = jnp.array([0.0, 0.0, -1.0], v.dtype)
    sides = []
    for a, b, o in ((0, 1, 2), (1, 2, 0), (2, 0, 1)):
        d = v[b] - v[a]
        nrm = jnp.stack([d[1], -d[0], jnp.zeros((), v.dtype)])
        sides.append(nrm * jnp.where(_dot(nrm, v[o] - v[a]) > 0, -1.0, 1.0))
    return _unit(jnp.stack([top, bottom] + sides))


def _edges(v):
    """(start points, unit directions) of the prism's 9 edges."""
    p0 = v[_EDGES[:, 0]]
    return p0, _unit(v[_EDGES[:, 1]] - p0)


def _point_dirs(v, pts):
    """Directions from the prism's vertices and edge lines to points pts (k, 3)."""
    p0, e = _edges(v)
    vv = pts[:, None, :] - v[None, :, :]  # (k, 6, 3)
    ve = _perp(pts[:, None, :] - p0[None], e[None])  # (k, 9, 3)
    return jnp.concatenate([vv.reshape(-1, 3), ve.reshape(-1, 3)], 0)


def _segment_dirs(v, s0, s1, axes=None):
    """Stationary directions between the prism and segments [s0, s1] (k, 3) each, beyond
    those of their endpoints, as (two-sided, one-sided): edge x segment normals (both
    ways), and from prism vertices to the segments' lines. `axes`: the segments' distinct
    directions when fewer (a box's three); the prism's three vertical edges share one
    direction, so it is crossed once."""
    p0, e = _edges(v)
    a = _unit(s1 - s0)  # (k, 3)
    u = a if axes is None else axes
    cr = jnp.cross(e[None, :7, :], u[:, None, :]).reshape(-1, 3)
    return cr, _perp(s0[:, None, :] - v[None], a[:, None, :]).reshape(-1, 3)


# Iterations of the root finders by precision (False: below float64). Below float64 fewer
# reach the same answers: 20000 random prisms near an ellipsoid or a cylinder, the float32
# distances' largest difference from float64's (30, 10) and 40 iterations' is the same with
# (12, 6) and 14 (1.9e-7 and 2.0e-4; with (12, 4) and 10: 3.5e-5 and 2.0e-3). Each
# iteration is a pass over every prism searched (terrain.xml's cylinder at batch 1024:
# `_trig_roots` took 59 of its collider's 98 ms).
_ROOT_ITERS = {True: {"conic": (30, 10), "trig": 40}, False: {"conic": (12, 6), "trig": 14}}


def _bisect(fn, lo, hi, iters: int):
    """Root of an increasing function fn in [lo, hi] (elementwise)."""

    def body(_, s):
        lo, hi = s
        mid = 0.5 * (lo + hi)
        up = fn(mid) > 0
        return jnp.where(up, lo, mid), jnp.where(up, mid, hi)

    lo, hi = lax.fori_loop(0, iters, body, (lo, hi))
    return 0.5 * (lo + hi)


def _conic_normals(y, a2, iters: int = 30, newton: int = 10):
    """Normals (unnormalised) of the ellipse/ellipsoid sum x_i^2 / a2_i = 1 at the points
    where the normal passes through y, i.e. the stationary points of the distance from y to
    its surface (a2 sorted descending; y, a2 with shape (..., d)). Returns (..., 4d, d).

    Those points are x_i = a2_i y_i / (t + a2_i) for the roots t of
    g(t) = sum (a_i y_i / (t + a2_i))^2 - 1: one left of the first pole -a2_0, one right of
    the last, none or two between consecutive poles (g is convex there). Each root is found
    from its neighbouring pole -a2_k by a bracketed Newton iteration on
    |t + a2_k| / sqrt((a_k y_k)^2 + (t + a2_k)^2 sum_(j != k) (a_j y_j / (t + a2_j))^2) - 1,
    nearly linear near the pole. Degenerate points (y_k = 0, t = -a2_k) are added as well;
    every returned direction is finite.
    """
    d = y.shape[-1]
    c2 = a2 * y * y
    cn = jnp.sqrt(jnp.sum(c2, -1, keepdims=True))
    poles = -a2  # ascending
    tiny, tiny3 = _tiny(y.dtype), _tiny(y.dtype, 1 / 3)

    def den(t):  # t (..., m) -> t + a2 (..., m, d), kept away from 0
        s = t[..., None] + a2[..., None, :]
        return jnp.where(jnp.abs(s) < tiny3, tiny3, s)

    # the minimum of g between consecutive poles separates its two roots there
    lo, hi = [poles[..., :1] - cn - 1e-12], [poles[..., :1]]
    kk, side = [0], [-1.0]
    if d > 1:
        tmin = _bisect(lambda t: jnp.sum(-2 * c2[..., None, :] / den(t) ** 3, -1),
                       poles[..., :-1], poles[..., 1:], iters)
        lo += [poles[..., :-1], tmin]
        hi += [tmin, poles[..., 1:]]
        kk += list(range(d - 1)) + list(range(1, d))
        side += [1.0] * (d - 1) + [-1.0] * (d - 1)
    lo.append(poles[..., -1:])
    hi.append(poles[..., -1:] + cn + 1e-12)
    kk.append(d - 1)
    side.append(1.0)
    lo, hi = jnp.concatenate(lo, -1), jnp.concatenate(hi, -1)  # (..., 2d)
    onehot = jnp.asarray(np.eye(d)[kk], y.dtype)  # (2d, d): the anchoring pole
    sgn = jnp.asarray(side, y.dtype)
    ak2 = onehot @ a2[..., :, None]  # (..., 2d, 1)
    ck2 = (onehot @ c2[..., :, None])[..., 0]
    pole = -ak2[..., 0]

    def psi(t):
        s = t + ak2[..., 0]
        q = jnp.sum(jnp.where(onehot > 0, 0.0, c2[..., None, :] / den(t) ** 2), -1)
        dq = jnp.sum(jnp.where(onehot > 0, 0.0, -2 * c2[..., None, :] / den(t) ** 3), -1)
        dn2 = jnp.maximum(ck2 + s * s * q, tiny)
        dn = jnp.sqrt(dn2)
        val = sgn * s / dn - 1
        der = (sgn * dn - sgn * s * (2 * s * q + s * s * dq) / (2 * dn)) / dn2
        return val, der

    # bracket [near, far] with psi(near) < 0 (the pole); psi(far) > 0 iff there is a root
    def newton_step(_, st):
        t, near, far = st
        val, der = psi(t)
        near = jnp.where(val < 0, t, near)
        far = jnp.where(val < 0, far, t)
        step = t - val / jnp.where(jnp.abs(der) > tiny, der, tiny)
        inside = (step - near) * (step - far) <= 0
        return jnp.where(inside, step, 0.5 * (near + far)), near, far

    near = jnp.where(sgn > 0, lo, hi)
    far = jnp.where(sgn > 0, hi, lo)
    t = lax.fori_loop(0, newton, newton_step, (jnp.broadcast_to(pole, lo.shape), near, far))[0]
    # degenerate points: t = -a2_k with y_k = 0 (k along the second last axis)
    eye = jnp.asarray(np.eye(d), bool)
    dk = a2[..., None, :] - a2[..., :, None]  # (..., k, j)
    dk = jnp.where(jnp.abs(dk) < 1e-12 * jnp.max(a2, -1)[..., None, None], 1e-12, dk)
    nu = jnp.where(eye, 0.0, y[..., None, :] / dk)
    rad = jnp.maximum(1 - jnp.sum(a2[..., None, :] * nu * nu, -1), 0.0)
    nk = jnp.sqrt(rad / a2)[..., None]  # (..., k, 1)
    nrm = [y[..., None, :] / den(t), jnp.where(eye, nk, nu), jnp.where(eye, -nk, nu)]
    return jnp.concatenate(nrm, -2)


def _ellipsoid_dirs(v, g: _G):
    """Normals of the ellipsoid through the prism's vertices and edge lines (to be taken
    both ways)."""
    s2 = g.size * g.size
    order = jnp.argsort(-s2)
    a2 = s2[order]
    # vertices: in the ellipsoid's frame, axes sorted by decreasing size
    y = ((v - g.pos) @ g.mat)[:, order]  # (6, 3)
    it = _ROOT_ITERS[jnp.dtype(v.dtype) == jnp.float64]["conic"]
    nu = _conic_normals(y, jnp.broadcast_to(a2, y.shape), *it)  # (6, 12, 3)
    nu = jnp.zeros_like(nu).at[..., order].set(nu)
    vdirs = (nu @ g.mat.T).reshape(-1, 3)
    # edge lines: the ellipsoid projected on the plane normal to the edge
    p0, e = _edges(v)
    helper = jnp.where((jnp.abs(e[:, 0]) < 0.6)[:, None], jnp.array([1.0, 0.0, 0.0], v.dtype),
                       jnp.array([0.0, 1.0, 0.0], v.dtype))
    u = _unit(jnp.cross(e, helper))
    w = jnp.cross(e, u)
    amat = (g.mat * s2) @ g.mat.T
    a11 = _dot(u @ amat, u)
    a22 = _dot(w @ amat, w)
    a12 = _dot(u @ amat, w)
    phi = 0.5 * jnp.arctan2(2 * a12, a11 - a22)
    cs, sn = jnp.cos(phi), jnp.sin(phi)
    l1 = a11 * cs * cs + 2 * a12 * sn * cs + a22 * sn * sn
    l2 = a11 * sn * sn - 2 * a12 * sn * cs + a22 * cs * cs
    q1 = cs[:, None] * u + sn[:, None] * w  # eigen-directions in 3D
    q2 = -sn[:, None] * u + cs[:, None] * w
    rel = p0 - g.pos
    y2 = jnp.stack([_dot(rel, q1), _dot(rel, q2)], -1)
    a22v = jnp.maximum(jnp.stack([l1, l2], -1), _tiny(v.dtype))
    nu2 = _conic_normals(y2, a22v, *it)  # (9, 8, 2)
    edirs = (nu2[..., :1] * q1[:, None, :] + nu2[..., 1:] * q2[:, None, :]).reshape(-1, 3)
    return jnp.concatenate([vdirs, edirs], 0)


def _trig_roots(ca, cb, cc, cd, newton: int, iters: int = 40):
    """Angles th where ca cos th + cb sin th + cc cos 2th + cd sin 2th = 0 (elementwise).

    With z = exp(i th) the zeros are those on the unit circle of the quartic
    (cc - i cd) z^4 + (ca - i cb) z^3 + (ca + i cb) z + (cc + i cd), found together by
    Durand-Kerner iterations and polished by Newton steps on the real function. Returns
    (..., 6): the four roots' angles and the two zeros of the first harmonic alone (the
    roots when the second harmonic vanishes); angles of complex roots are harmless junk.
    """
    cdt = jnp.complex128 if ca.dtype == jnp.float64 else jnp.complex64
    c4 = (cc - 1j * cd).astype(cdt)
    c3 = (ca - 1j * cb).astype(cdt)
    c1 = (ca + 1j * cb).astype(cdt)
    c0 = (cc + 1j * cd).astype(cdt)
    tiny = _tiny(ca.dtype, 0.25)
    scale = jnp.abs(c3) + jnp.abs(c4) + tiny
    c4 = jnp.where(jnp.abs(c4) < 1e-13 * scale, 1e-13 * scale, c4)
    b3, b1, b0 = c3 / c4, c1 / c4, c0 / c4
    z = jnp.exp(1j * (0.4 + jnp.arange(4, dtype=ca.dtype) * (np.pi / 2))).astype(cdt)
    z = jnp.broadcast_to(z, ca.shape + (4,))
    off = ~np.eye(4, dtype=bool)

    def body(_, z):
        pz = ((z + b3[..., None]) * z * z + b1[..., None]) * z + b0[..., None]
        diff = z[..., :, None] - z[..., None, :]
        den = jnp.prod(jnp.where(off, diff, 1.0), -1)
        den = jnp.where(jnp.abs(den) < tiny, tiny, den)
        return z - pz / den

    z = lax.fori_loop(0, iters, body, z)
    first = jnp.arctan2(ca, -cb)[..., None] + jnp.array([0.0, np.pi], ca.dtype)
    th = jnp.concatenate([jnp.angle(z).astype(ca.dtype), first], -1)
    ca, cb, cc, cd = (x[..., None] for x in (ca, cb, cc, cd))
    for _ in range(newton):
        cth, sth = jnp.cos(th), jnp.sin(th)
        c2, s2 = cth * cth - sth * sth, 2 * sth * cth
        f1 = ca * cth + cb * sth + cc * c2 + cd * s2
        f2 = -ca * sth + cb * cth - 2 * cc * s2 + 2 * cd * c2
        step = f1 / jnp.where(jnp.abs(f2) > tiny, f2, tiny)
        th = th - jnp.clip(step, -0.05, 0.05)
    return th


def _cylinder_dirs(v, g: _G, newton: int = 3):
    """Stationary directions between the prism and a cylinder (to be taken both ways): its
    axis (caps), edge x axis (edge on the side), radial (vertex on the side), vertex to
    nearest and farthest rim points, and the common normals of edge lines and rim
    circles."""
    a, e1, e2 = g.mat[:, 2], g.mat[:, 0], g.mat[:, 1]
    r, h = g.size[0], g.size[1]
    p0, e = _edges(v)
    out = [a[None], _unit(jnp.cross(e, a[None]))]
    rad = _unit(_perp(v - g.pos, a))  # (6, 3) radial direction of each vertex
    out.append(rad)
    rims = jnp.stack([g.pos + h * a, g.pos - h * a])  # (2, 3)
    q = rims[None, :, None, :] + r * jnp.stack([rad, -rad], 1)[:, None, :, :]  # (6, 2, 2, 3)
    out.append((q - v[:, None, None, :]).reshape(-1, 3))
    # edge line (p0, e) against rim circle c + r (cos th e1 + sin th e2): the derivative of
    # their squared distance is 2 r (A cos th + B sin th + C cos 2th + D sin 2th)
    d0 = _perp(rims[None, :, :] - p0[:, None, :], e[:, None, :])  # (9, 2, 3)
    al, be = (e @ e1)[:, None], (e @ e2)[:, None]
    ca, cb = d0 @ e2, -(d0 @ e1)
    cc, cd = -r * al * be, 0.5 * r * (al * al - be * be)
    ca, cb, cc, cd = (jnp.broadcast_to(x, (9, 2)) for x in (ca, cb, cc, cd))

    th = _trig_roots(ca, cb, cc, cd, newton,
                     _ROOT_ITERS[jnp.dtype(v.dtype) == jnp.float64]["trig"])
    cth, sth = jnp.cos(th)[..., None], jnp.sin(th)[..., None]
    qq = rims[None, :, None, :] + r * (cth * e1 + sth * e2)
    out.append(_perp(qq - p0[:, None, None, :], e[:, None, None, :]).reshape(-1, 3))
    return jnp.concatenate(out, 0)


def _box_geometry(g: _G):
    """Corners (8, 3) and edges (12 start points, 12 directions) of a box."""
    sg = np.array([[(i >> k & 1) * 2 - 1 for k in range(3)] for i in range(8)], float)
    corners = g.pos + (jnp.asarray(sg, g.pos.dtype) * g.size) @ g.mat.T
    starts, dirs = [], []
    for k in range(3):
        for i in range(8):
            if not i >> k & 1:
                starts.append(i)
                dirs.append(k)
    return corners, corners[np.array(starts)], g.mat.T[np.array(dirs)]


def _mesh_geometry(g: _G, data):
    """Vertices (V, 3), polygon normals (P, 3) and polygon edges (starts, ends) of a mesh."""
    vert = g.pos + g.vert @ g.mat.T
    pv = data.poly_vert
    npv = data.poly_nvert
    k = jnp.arange(pv.shape[1])
    nxt = jnp.where(k[None, :] + 1 < npv[:, None], k[None, :] + 1, 0)
    i0 = jnp.maximum(pv, 0)
    i1 = jnp.maximum(jnp.take_along_axis(pv, nxt, 1), 0)
    normals = data.poly_normal.astype(g.pos.dtype) @ g.mat.T
    return vert, normals, vert[i0.reshape(-1)], vert[i1.reshape(-1)]


def _candidates(t: int, v, g: _G, data):
    """Candidate directions for the prism v (6, 3) and geom g, unnormalised, as
    (one-sided (k1, 3), two-sided (k2, 3): each to be taken both ways)."""
    faces = _prism_faces(v)
    if t == SPHERE:
        return jnp.concatenate([faces, _point_dirs(v, g.pos[None])], 0), None
    if t == CAPSULE:
        a = g.mat[:, 2] * g.size[1]
        s0, s1 = (g.pos - a)[None], (g.pos + a)[None]
        cr, lines = _segment_dirs(v, s0, s1)
        return jnp.concatenate([faces, _point_dirs(v, jnp.concatenate([s0, s1])), lines],
                               0), cr
    if t == ELLIPSOID:
        return faces, _ellipsoid_dirs(v, g)
    if t == CYLINDER:
        return faces, _cylinder_dirs(v, g)
    if t == BOX:
        corners, starts, dirs = _box_geometry(g)
        cr, lines = _segment_dirs(v, starts, starts + dirs, axes=g.mat.T)
        return (jnp.concatenate([faces, _point_dirs(v, corners), lines], 0),
                jnp.concatenate([g.mat.T, cr], 0))
    vert, normals, q0, q1 = _mesh_geometry(g, data)
    cr, lines = _segment_dirs(v, q0, q1)
    return (jnp.concatenate([faces, _point_dirs(v, vert), lines], 0),
            jnp.concatenate([normals, cr], 0))


# ---------------------------------------------------------------------- one prism


def _features(vals, tol):
    """Indices of the best and second best values and how many are within tol of the best
    (1, 2 or 3 for 'three or more')."""
    i1 = jnp.argmax(vals)
    idx = jnp.arange(vals.shape[0])
    v2 = jnp.where(idx == i1, -jnp.inf, vals)
    i2 = jnp.argmax(v2)
    v3 = jnp.where(idx == i2, -jnp.inf, v2)
    best = vals[i1]
    cnt = 1 + (v2[i2] >= best - tol).astype(jnp.int32) + (jnp.max(v3) >= best - tol)
    return i1, i2, cnt


def _witness(t: int, v, g: _G, data, n, dist, tol):
    """Contact position for direction n: halfway between the witness points of prism and
    geom, taken from whichever side touches with a single point (else edge-edge closest
    points, else the middle of the geom's touching feature)."""
    xg = _spoint(t, g, -n)
    if t in (SPHERE, ELLIPSOID):
        return xg - 0.5 * dist * n
    pi1, pi2, pcnt = _features(lax.stop_gradient(v @ n), tol)
    if t == CAPSULE:
        a = g.mat[:, 2] * g.size[1]
        ends = jnp.stack([g.pos - a, g.pos + a]) - g.size[0] * n
        ev = -(ends @ n)
        g_unique = jnp.abs(ev[0] - ev[1]) > tol
        g0, g1 = ends[0], ends[1]
        mid_g = 0.5 * (g0 + g1)
    elif t == CYLINDER:
        lm = g.mat.T @ -n
        side = jnp.abs(lm[2]) * g.size[1] <= tol
        cap = jnp.sqrt(lm[0] * lm[0] + lm[1] * lm[1]) * g.size[0] <= tol
        a = g.mat[:, 2] * g.size[1]
        sgn = jnp.where(lm[2] >= 0, 1.0, -1.0)
        radial = xg - a * sgn  # support point on the middle circle
        g0, g1 = radial - a, radial + a  # the side line (meaningful when `side`)
        g_unique = ~side & ~cap
        mid_g = jnp.where(side, radial, g.pos + a * sgn)
    else:
        pts = _box_geometry(g)[0] if t == BOX else _mesh_geometry(g, data)[0]
        gv = lax.stop_gradient(-(pts @ n))
        gi1, gi2, gcnt = _features(gv, tol)
        g_unique = gcnt == 1
        g0, g1 = pts[gi1], pts[gi2]
        near = (gv >= gv[gi1] - tol)[:, None]
        mid_g = jnp.sum(jnp.where(near, pts, 0.0), 0) / jnp.maximum(jnp.sum(near), 1)
    from_g = xg - 0.5 * dist * n
    p_unique = pcnt == 1
    c1, c2 = _seg_closest(v[pi1], v[pi2], g0, g1)
    from_p = v[pi1] + 0.5 * dist * n
    edges = 0.5 * (c1 + c2)
    fallback = mid_g - 0.5 * dist * n
    both_edges = (pcnt == 2) & ~g_unique
    if t in (BOX, MESH):
        both_edges = both_edges & (gcnt == 2)
    if t == CYLINDER:
        both_edges = both_edges & side
    return jnp.where(g_unique, from_g, jnp.where(p_unique, from_p,
                                                 jnp.where(both_edges, edges, fallback)))


def _search(t: int, v, g: _G, data):
    """Signed distance and unit normal (prism to geom) of one prism (stopped inputs)."""
    one, two = _candidates(t, v, g, data)
    if two is not None and t == MESH:  # not symmetric about its centre
        one, two = jnp.concatenate([one, _both(two)], 0), None
    one = _unit(one)
    f = [_max(_dots(one, v)) + _hsup(t, g, -one)]
    cand = [one]
    if two is not None:
        # F(n) and F(-n) from one product with the vertices: G is symmetric about g.pos
        two = _unit(two)
        dots = _dots(two, v)
        base = _dot(two, g.pos)
        sym = _hsup(t, g, two) - base
        f += [_max(dots) - base + sym, base + sym - _min(dots)]
        cand += [two, -two]
    f = jnp.concatenate(f)
    i = _argmin(f)
    return -f[i], jnp.concatenate(cand)[i]


def _argmin(f):
    """First index of the minimum of a 1-D array, as two plain reductions: XLA:CPU's
    variadic argmin reduce is several times slower (terrain.xml's cylinder at batch 1024:
    7.5 of its collider's 57 ms)."""
    n = f.shape[0]
    f = lax.optimization_barrier(f)  # else XLA may compute f twice, rounding it differently
    return jnp.minimum(jnp.min(jnp.where(f == jnp.min(f), jnp.arange(n, dtype=jnp.int32), n)),
                       n - 1)


def _evaluate(t: int, v, g: _G, data, n):
    """Signed distance along the frozen normal n, and the contact position (with gradients
    through the prism v and the geom g)."""
    dist = -(_max(_dot(v, n)) + _hsup(t, g, -n))
    scale = lax.stop_gradient(jnp.max(jnp.abs(v)) + _rbound(t, g.size, g.vert))
    # ties within rounding: mesh vertices are single precision
    tol = (1e-6 if t == MESH else 1e-9) * scale
    return dist, _witness(t, v, g, data, n, dist, tol)
