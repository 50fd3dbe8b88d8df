"""Ray casting (MuJoCo: engine_ray.c): `ray` (exported as `jaxsim.ray`) is mj_ray, the
rangefinder's workhorse.

A ray pnt + x vec (x >= 0) is intersected with every geom that is not eliminated (the
excluded body, invisible geoms, static geoms without `flg_static`, geom groups), one
vectorised call per geom type; the nearest hit wins, the first geom on ties, as MuJoCo's
strict comparison in geom order. Meshes are intersected with all their triangles (MuJoCo
walks a bounding volume hierarchy; the nearest triangle is the same), height fields with
all their triangles and the sides and base of their box, as mj_rayHfield.

Every function returns the distance x (-1 without a hit) and the surface normal (global
frame, zero without a hit).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jaxsim.types import GeomType, Model, State

MINVAL = 1e-15


def _normalize(v):
    n2 = jnp.sum(v * v, -1, keepdims=True)
    ok = n2 > MINVAL * MINVAL
    return jnp.where(ok, v / jnp.sqrt(jnp.where(ok, n2, 1.0)), v)


def _first_min(xs, extras):
    """The smallest non-negative x of a list (the first on ties), -1 if none, with the
    matching entries of `extras` (a list of arrays per candidate)."""
    xs = jnp.stack(xs)
    key = jnp.where(xs >= 0, xs, jnp.inf)
    i = jnp.argmin(key)
    hit = jnp.isfinite(key[i])
    return jnp.where(hit, xs[i], -1.0), [jnp.stack(e)[i] for e in extras], hit


def _map(pos, mat, pnt, vec):
    return mat.T @ (pnt - pos), mat.T @ vec


def _quad(a, b, c):
    """Both roots of a x^2 + 2 b x + c = 0 (-1 if not real) and the smallest non-negative."""
    det = b * b - a * c
    ok = (det >= 0) & (a >= MINVAL)
    s = jnp.sqrt(jnp.where(ok, det, 0.0))
    a_ = jnp.where(ok, a, 1.0)
    x0 = jnp.where(ok, (-b - s) / a_, -1.0)
    x1 = jnp.where(ok, (-b + s) / a_, -1.0)
    return x0, x1, jnp.where(x0 >= 0, x0, jnp.where(x1 >= 0, x1, -1.0))


def ray_plane(pos, mat, size, pnt, vec):
    lp, lv = _map(pos, mat, pnt, vec)
    front = lv[2] <= -MINVAL
    x = -lp[2] / jnp.where(front, lv[2], -1.0)
    p0, p1 = lp[0] + x * lv[0], lp[1] + x * lv[1]
    inside = (((size[0] <= 0) | (jnp.abs(p0) <= size[0]))
              & ((size[1] <= 0) | (jnp.abs(p1) <= size[1])))
    hit = front & (x >= 0) & inside
    return jnp.where(hit, x, -1.0), jnp.where(hit, mat[:, 2], 0.0)


def _sphere_x(pos, r2, pnt, vec):
    dif = pnt - pos
    return _quad(jnp.dot(vec, vec), jnp.dot(vec, dif), jnp.dot(dif, dif) - r2)[2]


def ray_sphere(pos, mat, size, pnt, vec):
    x = _sphere_x(pos, size[0] * size[0], pnt, vec)
    n = _normalize(pnt + vec * x - pos)
    return x, jnp.where(x >= 0, n, 0.0)


def ray_capsule(pos, mat, size, pnt, vec):
    r, h = size[0], size[1]
    bound = _sphere_x(pos, (r + h) ** 2, pnt, vec) >= 0
    lp, lv = _map(pos, mat, pnt, vec)
    sol = _quad(lv[0] ** 2 + lv[1] ** 2, lv[0] * lp[0] + lv[1] * lp[1],
                lp[0] ** 2 + lp[1] ** 2 - r * r)[2]
    cands = [jnp.where((sol >= 0) & (jnp.abs(lp[2] + sol * lv[2]) <= h), sol, -1.0)]
    types = [0.0]
    a = jnp.dot(lv, lv)
    for side in (1.0, -1.0):
        ld = lp.at[2].add(-side * h)
        x0, x1, _ = _quad(a, jnp.dot(lv, ld), jnp.dot(ld, ld) - r * r)
        for xx in (x0, x1):
            z = lp[2] + xx * lv[2]
            ok = (xx >= 0) & ((z >= h) if side > 0 else (z <= -h))
            cands.append(jnp.where(ok, xx, -1.0))
            types.append(side)
    x, (typ,), hit = _first_min(cands, [[jnp.asarray(t) for t in types]])
    hit = hit & bound
    loc = lp + lv * x
    loc = loc.at[2].set(jnp.where(typ == 0, 0.0, loc[2] - h * typ))
    return jnp.where(hit, x, -1.0), jnp.where(hit, mat @ _normalize(loc), 0.0)


def ray_ellipsoid(pos, mat, size, pnt, vec):
    lp, lv = _map(pos, mat, pnt, vec)
    s = 1 / (size * size)
    x = _quad(jnp.sum(s * lv * lv), jnp.sum(s * lv * lp), jnp.sum(s * lp * lp) - 1)[2]
    n = mat @ _normalize(s * (lp + lv * x))
    return x, jnp.where(x >= 0, n, 0.0)


def ray_cylinder(pos, mat, size, pnt, vec):
    r, h = size[0], size[1]
    bound = _sphere_x(pos, r * r + h * h, pnt, vec) >= 0
    lp, lv = _map(pos, mat, pnt, vec)
    okz = jnp.abs(lv[2]) > MINVAL
    cands, types = [], []
    for side in (-1.0, 1.0):
        sol = (side * h - lp[2]) / jnp.where(okz, lv[2], 1.0)
        p0, p1 = lp[0] + sol * lv[0], lp[1] + sol * lv[1]
        cands.append(jnp.where(okz & (sol >= 0) & (p0 * p0 + p1 * p1 <= r * r), sol, -1.0))
        types.append(side)
    sol = _quad(lv[0] ** 2 + lv[1] ** 2, lv[0] * lp[0] + lv[1] * lp[1],
                lp[0] ** 2 + lp[1] ** 2 - r * r)[2]
    cands.append(jnp.where((sol >= 0) & (jnp.abs(lp[2] + sol * lv[2]) <= h), sol, -1.0))
    types.append(0.0)
    x, (typ,), hit = _first_min(cands, [[jnp.asarray(t) for t in types]])
    hit = hit & bound
    loc = lp + lv * x
    side_n = _normalize(jnp.stack([loc[0], loc[1], jnp.zeros_like(x)]))
    n = jnp.where(typ == 0, side_n, jnp.stack([0.0 * x, 0.0 * x, typ]))
    return jnp.where(hit, x, -1.0), jnp.where(hit, mat @ n, 0.0)


_IFACE = ((1, 2), (0, 2), (0, 1))


def _box(pos, mat, size, pnt, vec):
    """ray_box: (x, normal, all) with `all` (6,) the hits of each face (-1 if none)."""
    bound = _sphere_x(pos, jnp.sum(size * size), pnt, vec) >= 0
    lp, lv = _map(pos, mat, pnt, vec)
    cands, normals = [], []
    for i, (j, k) in enumerate(_IFACE):
        ok = jnp.abs(lv[i]) > MINVAL
        for side in (-1.0, 1.0):
            sol = (side * size[i] - lp[i]) / jnp.where(ok, lv[i], 1.0)
            p0, p1 = lp[j] + sol * lv[j], lp[k] + sol * lv[k]
            hit = ok & (sol >= 0) & (jnp.abs(p0) <= size[j]) & (jnp.abs(p1) <= size[k])
            cands.append(jnp.where(hit & bound, sol, -1.0))
            normals.append(mat[:, i] * side)
    x, (n,), hit = _first_min(cands, [normals])
    return x, jnp.where(hit, n, 0.0), jnp.stack(cands)


def ray_box(pos, mat, size, pnt, vec):
    return _box(pos, mat, size, pnt, vec)[:2]


PRIMITIVES = {GeomType.PLANE: ray_plane, GeomType.SPHERE: ray_sphere,
              GeomType.CAPSULE: ray_capsule, GeomType.ELLIPSOID: ray_ellipsoid,
              GeomType.CYLINDER: ray_cylinder, GeomType.BOX: ray_box}


def _basis(lv):
    """The two unit vectors spanning the plane normal to the ray (as MuJoCo builds them)."""
    a = jnp.abs(lv)
    i = jnp.where((a[0] >= a[1]) & (a[0] >= a[2]), 0, jnp.where(a[1] >= a[2], 1, 2))
    b0 = jnp.ones(3, lv.dtype).at[i].set(0.0)
    b1 = _normalize(b0 - lv * (jnp.dot(lv, b0) / jnp.dot(lv, lv)))
    return _normalize(jnp.cross(b1, lv)), b1


def _triangles(v, lp, lv, b0, b1):
    """ray_triangle for triangles v (T, 3, 3) in the local frame: (x (T,), normal (T, 3))."""
    dif = v - lp
    pl = jnp.stack([dif @ b0, dif @ b1], -1)  # (T, 3, 2)
    same = jnp.any(jnp.all(pl > 0, 1) | jnp.all(pl < 0, 1), -1)
    a00 = pl[:, 0, 0] - pl[:, 2, 0]
    a01 = pl[:, 1, 0] - pl[:, 2, 0]
    a10 = pl[:, 0, 1] - pl[:, 2, 1]
    a11 = pl[:, 1, 1] - pl[:, 2, 1]
    b0_, b1_ = -pl[:, 2, 0], -pl[:, 2, 1]
    det = a00 * a11 - a01 * a10
    okd = jnp.abs(det) >= MINVAL
    det = jnp.where(okd, det, 1.0)
    t0 = (a11 * b0_ - a01 * b1_) / det
    t1 = (-a10 * b0_ + a00 * b1_) / det
    inside = (t0 >= 0) & (t1 >= 0) & (t0 + t1 <= 1)
    nrm = jnp.cross(v[:, 0] - v[:, 2], v[:, 1] - v[:, 2])
    den = nrm @ lv
    okn = jnp.abs(den) >= MINVAL
    x = -jnp.sum((lp - v[:, 2]) * nrm, -1) / jnp.where(okn, den, 1.0)
    ok = ~same & okd & inside & okn
    return jnp.where(ok, x, -1.0), _normalize(nrm)


def _nearest(xs, normals):
    key = jnp.where(xs >= 0, xs, jnp.inf)
    i = jnp.argmin(key)
    hit = jnp.isfinite(key[i])
    return jnp.where(hit, xs[i], -1.0), jnp.where(hit, normals[i], 0.0)


def ray_mesh(pos, mat, size, tri, pnt, vec):
    """Mesh with triangles `tri` (T, 3, 3) in its frame; MuJoCo's bounding box test first."""
    inbox = _box(pos, mat, size, pnt, vec)[0] >= 0
    lp, lv = _map(pos, mat, pnt, vec)
    b0, b1 = _basis(lv)
    x, n = _nearest(*_triangles(tri, lp, lv, b0, b1))
    hit = inbox & (x >= 0)
    return jnp.where(hit, x, -1.0), jnp.where(hit, mat @ n, 0.0)


def ray_hfield(pos, mat, hsize, elev, pnt, vec):
    """mj_rayHfield for a height field with elevations `elev` (nrow, ncol) in [0, 1]."""
    nrow, ncol = elev.shape
    zb, zt = hsize[3], hsize[2]
    base_size = jnp.stack([hsize[0], hsize[1], zb * 0.5])
    x_base, n_base, _ = _box(pos - mat[:, 2] * zb * 0.5, mat, base_size, pnt, vec)
    x = x_base
    top_size = jnp.stack([hsize[0], hsize[1], zt * 0.5])
    top, _, alls = _box(pos + mat[:, 2] * zt * 0.5, mat, top_size, pnt, vec)
    lp, lv = _map(pos, mat, pnt, vec)
    b0, b1 = _basis(lv)
    dx = 2.0 * hsize[0] / (ncol - 1)
    dy = 2.0 * hsize[1] / (nrow - 1)
    r, c = np.meshgrid(np.arange(nrow - 1), np.arange(ncol - 1), indexing="ij")
    r, c = r.reshape(-1), c.reshape(-1)

    def vert(rr, cc):
        return jnp.stack([dx * cc - hsize[0], dy * rr - hsize[1],
                          elev[rr, cc] * hsize[2]], -1)

    v00, v01, v11, v10 = vert(r, c), vert(r, c + 1), vert(r + 1, c + 1), vert(r + 1, c)
    tri = jnp.stack([jnp.stack([v00, v01, v11], 1), jnp.stack([v00, v11, v10], 1)],
                    1).reshape(-1, 3, 3)  # per cell: first triangle, then second
    xt, nt = _nearest(*_triangles(tri, lp, lv, b0, b1))
    n_loc = mat.T @ n_base
    better = (xt >= 0) & ((x < 0) | (xt < x))
    x = jnp.where(better, xt, x)
    n_loc = jnp.where(better, nt, n_loc)
    side_normals = jnp.array([[-1.0, 0, 0], [1, 0, 0], [0, -1, 0], [0, 1, 0]], pos.dtype)
    for i in range(4):
        a = alls[i]
        z = (lp[2] + a * lv[2]) / hsize[2]
        if i < 2:
            y = (lp[1] + a * lv[1] + hsize[1]) / dy
            y0 = jnp.clip(jnp.floor(y), 0, nrow - 2)
            col = ncol - 1 if i == 1 else 0
            iy = y0.astype(jnp.int32)
            z0, z1 = elev[iy, col], elev[iy + 1, col]
        else:
            y = (lp[0] + a * lv[0] + hsize[0]) / dx
            y0 = jnp.clip(jnp.floor(y), 0, ncol - 2)
            row = nrow - 1 if i == 3 else 0
            iy = y0.astype(jnp.int32)
            z0, z1 = elev[row, iy], elev[row, iy + 1]
        use = (a >= 0) & ((a < x) | (x < 0)) & (z < z0 * (y0 + 1 - y) + z1 * (y - y0))
        x = jnp.where(use, a, x)
        n_loc = jnp.where(use, side_normals[i], n_loc)
    # a ray that misses the top box can only hit the base
    x = jnp.where(top >= 0, x, x_base)
    n = jnp.where(top >= 0, mat @ n_loc, n_base)
    return x, jnp.where(x >= 0, n, 0.0)


# ------------------------------------------------------------------------------ mj_ray


def _mesh_triangles(m: Model, mesh: int) -> jax.Array:
    """(T, 3, 3) triangles of a mesh in its frame, vertices rounded to float32 as
    mjModel stores them."""
    va, fa = int(m.mesh_vertadr[mesh]), int(m.mesh_faceadr[mesh])
    fn = int(m.mesh_facenum[mesh])
    face = np.asarray(m.mesh_face)[fa:fa + fn] + va
    vert = m.mesh_vert.astype(jnp.float32).astype(m.mesh_vert.dtype)
    return vert[face]


def _hfield_elev(m: Model, h: int) -> jax.Array:
    nrow, ncol = int(m.hfield_nrow[h]), int(m.hfield_ncol[h])
    adr = int(m.hfield_adr[h])
    data = m.hfield_data.astype(jnp.float32).astype(m.hfield_size.dtype)
    return data[adr:adr + nrow * ncol].reshape(nrow, ncol)


def _eliminated(m: Model, geomgroup, flg_static: bool, bodyexclude) -> jax.Array:
    """ray_eliminate for every geom: (ngeom,) bool (colours are model leaves, so traced)."""
    body = np.asarray(m.geom_bodyid)
    out = jnp.asarray(body) == bodyexclude
    matid = np.asarray(m.geom_matid)
    alpha = m.geom_rgba[:, 3]
    if m.nmat:
        alpha = jnp.where(jnp.asarray(matid >= 0), m.mat_rgba[np.maximum(matid, 0), 3], alpha)
    out = out | (alpha == 0)
    if not flg_static:
        out = out | jnp.asarray(np.asarray(m.body_weldid)[body] == 0)
    if geomgroup is not None:
        grp = np.clip(np.asarray(m.geom_group), 0, 5)
        out = out | jnp.asarray(np.asarray(geomgroup)[grp] == 0)
    return out


def ray_all(m: Model, d: State, pnt: jax.Array, vec: jax.Array, geomgroup=None,
            flg_static: bool = True, bodyexclude=-1) -> tuple:
    """Distances (ngeom,) of one ray to every geom (-1: no hit or eliminated) and the
    normals (ngeom, 3)."""
    dt = d.geom_xpos.dtype
    gt = np.asarray(m.geom_type)
    dist = -jnp.ones(m.ngeom, dt)
    normal = jnp.zeros((m.ngeom, 3), dt)
    for t in dict.fromkeys(gt.tolist()):
        ids = np.nonzero(gt == t)[0]
        pos, mat, size = d.geom_xpos[ids], d.geom_xmat[ids], m.geom_size[ids]
        if t in PRIMITIVES:
            x, n = jax.vmap(PRIMITIVES[t], (0, 0, 0, None, None))(pos, mat, size, pnt, vec)
        elif t in (GeomType.MESH, GeomType.HFIELD):
            xs, ns = [], []
            for k, g in enumerate(ids):  # each mesh / height field has its own shape
                data = int(m.geom_dataid[g])
                if t == GeomType.MESH:
                    xk, nk = ray_mesh(pos[k], mat[k], size[k], _mesh_triangles(m, data),
                                      pnt, vec)
                else:
                    xk, nk = ray_hfield(pos[k], mat[k], m.hfield_size[data],
                                        _hfield_elev(m, data), pnt, vec)
                xs.append(xk)
                ns.append(nk)
            x, n = jnp.stack(xs), jnp.stack(ns)
        else:
            raise NotImplementedError(f"ray intersection with {GeomType(t).name.lower()} geoms")
        dist, normal = dist.at[ids].set(x), normal.at[ids].set(n)
    gone = _eliminated(m, geomgroup, flg_static, bodyexclude)
    dist = jnp.where(gone, -1.0, dist)
    return dist, jnp.where(gone[:, None], 0.0, normal)


def ray(m: Model, d: State, pnt: jax.Array, vec: jax.Array, geomgroup=None,
        flg_static: bool = True, bodyexclude=-1) -> tuple:
    """The nearest geom along the ray pnt + x vec, x >= 0. MuJoCo: mj_ray.

    Args:
      pnt, vec: (3,) start point and direction (not necessarily unit; x is in its units).
      geomgroup: None (all groups) or 6 flags (static) of the geom groups to include.
      flg_static: include geoms of static bodies.
      bodyexclude: a body whose geoms are skipped (-1: none).

    Returns:
      (dist, geomid, normal): distance x (-1 if nothing is hit), geom id (-1), surface normal.
    Needs geom_xpos / geom_xmat (kinematics).
    """
    if not m.ngeom:
        dt = d.geom_xpos.dtype
        return -jnp.ones((), dt), -jnp.ones((), jnp.int32), jnp.zeros(3, dt)
    dist, normal = ray_all(m, d, pnt, vec, geomgroup, flg_static, bodyexclude)
    key = jnp.where(dist >= 0, dist, jnp.inf)
    i = jnp.argmin(key)
    hit = jnp.isfinite(key[i])
    return (jnp.where(hit, dist[i], -1.0), jnp.where(hit, i, -1).astype(jnp.int32),
            jnp.where(hit, normal[i], 0.0))


# --------------------------------------------------------------------- rangefinder

_RAYDATA_SIZE = (1, 3, 3, 3, 3, 1)  # dist, dir, origin, point, normal, depth


def _pixel_rays(m: Model, d: State, cam: int):
    """Origins and unit directions (npixel, 3) of a camera's pixels, row-major from the top
    (mju_camIntrinsics, mju_camPixelRay)."""
    dt = d.cam_xpos.dtype
    w, h = (int(x) for x in np.asarray(m.cam_resolution).reshape(-1, 2)[cam])
    ortho = int(m.cam_projection[cam]) == 1
    if ortho:
        fx, fy, cx, cy = w / 2.0, h / 2.0, w / 2.0, h / 2.0
    else:
        ss, intr = m.cam_sensorsize[cam], m.cam_intrinsic[cam]
        has = (ss[0] != 0) & (ss[1] != 0)
        f32 = jnp.float32  # intrinsic and sensorsize are floats, divided in float
        safe = jnp.where(ss == 0, 1.0, ss).astype(f32)
        res = jnp.asarray([w, h], f32)
        f_s = (intr[:2].astype(f32) / safe * res).astype(dt)
        c_s = (intr[2:].astype(f32) / safe * res).astype(dt)
        f_v = 0.5 / jnp.tan(m.cam_fovy[cam] * np.pi / 360.0) * h
        fx, fy = jnp.where(has, f_s[0], f_v), jnp.where(has, f_s[1], f_v)
        cx, cy = jnp.where(has, c_s[0], w / 2.0), jnp.where(has, c_s[1], h / 2.0)
    row, col = np.meshgrid(np.arange(h), np.arange(w), indexing="ij")
    px = jnp.asarray(col.reshape(-1) + 0.5, dt) - cx
    py = jnp.asarray(row.reshape(-1) + 0.5, dt) - cy
    pos, mat = d.cam_xpos[cam], d.cam_xmat[cam]
    n = px.shape[0]
    if ortho:
        half = m.cam_fovy[cam] / 2
        off = jnp.stack([px / fx * half, -py / fy * half, jnp.zeros(n, dt)], -1)
        return pos + off @ mat.T, jnp.broadcast_to(-mat[:, 2], (n, 3))
    dirs = jnp.stack([px / fx, -py / fy, -jnp.ones(n, dt)], -1) @ mat.T
    return jnp.broadcast_to(pos, (n, 3)), _normalize(dirs)


def _fill(spec: int, dist, direction, origin, normal, cam_pos=None, cam_z=None):
    """fill_raydata for rays (k,): (k, size)."""
    hit = (dist >= 0)[:, None]
    point = jnp.where(hit, origin + direction * dist[:, None], 0.0)
    if cam_z is None:
        depth = dist
    else:
        depth = -jnp.sum((point - cam_pos) * cam_z, -1)
    cols = {0: dist[:, None], 1: jnp.where(hit, direction, 0.0), 2: origin, 3: point,
            4: jnp.where(hit, normal, 0.0), 5: jnp.where(hit[:, 0], depth, -1.0)[:, None]}
    return jnp.concatenate([cols[j] for j in range(6) if spec & (1 << j)], -1)


def rangefinder(m: Model, d: State, sensor: int) -> jax.Array:
    """Rangefinder data (dim,): a ray along a site's z axis, or one per camera pixel."""
    from jaxsim.types import ObjType

    spec = int(np.asarray(m.sensor_intprm).reshape(-1, 3)[sensor, 0])
    obj = int(m.sensor_objid[sensor])
    if int(m.sensor_objtype[sensor]) == ObjType.SITE:
        origin, direction = d.site_xpos[obj][None], d.site_xmat[obj][:, 2][None]
        exclude = int(m.site_bodyid[obj])
        cam_pos = cam_z = None
    else:
        origin, direction = _pixel_rays(m, d, obj)
        exclude = int(m.cam_bodyid[obj])
        cam_pos, cam_z = d.cam_xpos[obj], d.cam_xmat[obj][:, 2]
    dist, _, normal = jax.vmap(lambda p, v: ray(m, d, p, v, None, True, exclude))(
        origin, direction)
    return _fill(spec, dist, direction, origin, normal, cam_pos, cam_z).reshape(-1)


__all__ = ["rangefinder", "ray", "ray_all", "ray_box", "ray_capsule", "ray_cylinder", "ray_ellipsoid",
           "ray_hfield", "ray_mesh", "ray_plane", "ray_sphere"]
