"""Sensors built on collision: contact sensors and geom distance sensors (MuJoCo:
mjSENS_CONTACT, mjSENS_GEOMDIST / GEOMNORMAL / GEOMFROMTO in engine_sensor.c).

A contact sensor reports, for the contacts that match its two object specs (geom, body,
subtree, site zone, or anything), up to `num` slots of the fields named in its data spec
(found, force, torque, dist, pos, normal, tangent), in contact order, or sorted by
distance or by force, or one net wrench about the force-weighted centroid.

Every contact slot of the fixed buffer is tested at once: matching is a vectorised test
against static per-sensor tables (subtree membership), and the slot selection is a
cumulative count (unsorted) or a stable sort (sorted reductions; ties go to the earlier
contact, as MuJoCo's partial sort with the contact index as second key). The buffer keeps
MuJoCo's contact order (collision/driver.py), so "first `num` contacts" agree.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jaxsim import math
from jaxsim.collision.common import contact_bodies
from jaxsim.types import GeomType, Model, ObjType, State

MINVAL = 1e-15
_SIZES = (1, 3, 3, 1, 3, 3, 3)  # found, force, torque, dist, pos, normal, tangent
FOUND, FORCE, TORQUE, DIST, POS, NORMAL, TANGENT = range(7)
NONE, MINDIST, MAXFORCE, NETFORCE = range(4)


def _np(x) -> np.ndarray:
    return np.asarray(x, dtype=np.int64)


def inside(m: Model, d: State, site: np.ndarray, point: jax.Array) -> jax.Array:
    """Whether global points (k, ..., 3) lie inside sites' volumes (mju_insideGeom), where
    `site` (k,) is static; the leading axis of `point` runs over the sites."""
    site = _np(site)
    extra = (1,) * (point.ndim - 2)
    spos = d.site_xpos[site].reshape((len(site),) + extra + (3,))
    smat = d.site_xmat[site].reshape((len(site),) + extra + (3, 3))
    size = m.site_size[site].reshape((len(site),) + extra + (3,))
    vec = point - spos
    loc = jnp.einsum("...ji,...j->...i", smat, vec)
    x2, y2 = loc[..., 0] ** 2, loc[..., 1] ** 2
    r2 = size[..., 0] ** 2
    zc = loc[..., 2] - jnp.clip(loc[..., 2], -size[..., 1], size[..., 1])
    safe = jnp.where(size == 0, 1.0, size)
    tests = {
        GeomType.SPHERE: lambda: jnp.sum(vec * vec, axis=-1) < r2,
        GeomType.CAPSULE: lambda: x2 + y2 + zc * zc < r2,
        GeomType.ELLIPSOID: lambda: jnp.sum((loc / safe) ** 2, axis=-1) < 1,
        GeomType.CYLINDER: lambda: (jnp.abs(loc[..., 2]) < size[..., 1]) & (x2 + y2 < r2),
        GeomType.BOX: lambda: jnp.all(jnp.abs(loc) < size, axis=-1),
        GeomType.PLANE: lambda: loc[..., 2] < 0,
    }
    stype = _np(m.site_type)[site]
    out = jnp.zeros(loc.shape[:-1], bool)
    for t in dict.fromkeys(stype.tolist()):
        if t not in tests:
            raise NotImplementedError(f"inside test for {GeomType(t).name.lower()} sites")
        sel = jnp.asarray(stype == t).reshape((len(site),) + extra)
        out = jnp.where(sel, tests[t](), out)
    return out


def _subtree_table(m: Model) -> np.ndarray:
    """(nbody, nbody) bool: [a, b] true where body b lies in the subtree of body a."""
    parent = _np(m.body_parentid)
    nb = len(parent)
    table = np.eye(nb, dtype=bool)
    for b in range(1, nb):  # parents precede children
        table[:, b] |= table[:, parent[b]]
    return table


def _object_match(m: Model, objtype: int, objid: int, body, geom, table):
    """checkMatch: whether the contact side (body, geom) matches the sensor object."""
    if objtype in (ObjType.UNKNOWN, ObjType.SITE):
        return jnp.ones(body.shape, bool)
    if objtype == ObjType.GEOM:
        return geom == objid
    if objtype == ObjType.BODY:
        return body == objid
    if objtype == ObjType.XBODY:
        return jnp.asarray(table[objid])[body]
    raise ValueError(f"contact sensor object type {objtype}")


def match(m: Model, d: State, sensor: int, table: np.ndarray) -> jax.Array:
    """matchContact for every slot: 0 no match, 1 match, -1 match with the normal flipped."""
    c = d.contact
    t1, id1 = int(m.sensor_objtype[sensor]), int(m.sensor_objid[sensor])
    t2, id2 = int(m.sensor_reftype[sensor]), int(m.sensor_refid[sensor])
    n = c.dist.shape[0]
    if t1 == ObjType.UNKNOWN and t2 == ObjType.UNKNOWN:
        return jnp.ones(n, jnp.int32)
    g = c.geom
    b1, b2 = contact_bodies(m, c).T
    m11 = _object_match(m, t1, id1, b1, g[:, 0], table)
    m12 = _object_match(m, t1, id1, b2, g[:, 1], table)
    m21 = _object_match(m, t2, id2, b1, g[:, 0], table)
    m22 = _object_match(m, t2, id2, b2, g[:, 1], table)
    ok = (m11 | m12) & (m21 | m22)
    if t1 == ObjType.SITE:
        ok &= inside(m, d, np.array([id1]), c.pos[None])[0]
    if t1 != ObjType.UNKNOWN and t2 != ObjType.UNKNOWN:
        regular, reverse = m11 & m22, m12 & m21
        res = jnp.where(regular, 1, jnp.where(reverse, -1, 0))
    elif t1 != ObjType.UNKNOWN:
        res = jnp.where(m11, 1, -1)
    else:
        res = jnp.where(m22, 1, -1)
    return jnp.where(ok, res, 0).astype(jnp.int32)


def _fields(spec: int) -> list[int]:
    return [j for j in range(7) if spec & (1 << j)]


def _per_contact(d: State, spec: int, flip: jax.Array, nfound: jax.Array,
                 force: jax.Array) -> jax.Array:
    """copySensorData for every slot: (ncon, slot size)."""
    c = d.contact
    dt = c.dist.dtype
    n = c.dist.shape[0]
    sign = jnp.where(flip, -1.0, 1.0).astype(dt)[:, None]
    zflip = jnp.concatenate([jnp.ones((n, 2), dt), sign], axis=1)
    cols = []
    for j in _fields(spec):
        if j == FOUND:
            cols.append(jnp.broadcast_to(nfound.astype(dt), (n, 1)))
        elif j == FORCE:
            cols.append(force[:, :3] * zflip)
        elif j == TORQUE:
            cols.append(force[:, 3:] * zflip)
        elif j == DIST:
            cols.append(c.dist[:, None])
        elif j == POS:
            cols.append(c.pos)
        elif j == NORMAL:
            cols.append(c.frame[:, 0] * sign)
        else:
            cols.append(c.frame[:, 1] * sign)
    return jnp.concatenate(cols, axis=1)


def _net(d: State, spec: int, matched, flip, nfound, force) -> jax.Array:
    """The netforce reduction: total wrench about the force-weighted contact centroid."""
    c = d.contact
    dt = c.dist.dtype
    w = jnp.where((matched & flip)[:, None], -force, force)
    w = jnp.where(matched[:, None], w, 0.0)
    weight = math.norm(w[:, :3])
    point = jnp.sum(weight[:, None] * c.pos, 0) / jnp.maximum(jnp.sum(weight), MINVAL)
    f = jnp.einsum("cji,cj->ci", c.frame, w[:, :3])
    t = jnp.einsum("cji,cj->ci", c.frame, w[:, 3:]) + jnp.cross(c.pos - point, f)
    f = jnp.where(matched[:, None], f, 0.0)
    t = jnp.where(matched[:, None], t, 0.0)
    unit = jnp.eye(3, dtype=dt)
    val = {FOUND: nfound.astype(dt)[None], FORCE: jnp.sum(f, 0), TORQUE: jnp.sum(t, 0),
           DIST: jnp.zeros(1, dt), POS: point, NORMAL: unit[0], TANGENT: unit[1]}
    return jnp.concatenate([val[j] for j in _fields(spec)])


def contact_sensor(m: Model, d: State, sensor: int, force: jax.Array,
                   table: np.ndarray) -> jax.Array:
    """Sensor data (dim,) of one contact sensor; `force` is rne.contact_force (ncon, 6)."""
    spec, reduce, num = (int(x) for x in np.asarray(m.sensor_intprm).reshape(-1, 3)[sensor])
    dim = int(m.sensor_dim[sensor])
    size = dim // num
    dt = d.qpos.dtype
    c = d.contact
    n = c.dist.shape[0]
    if n == 0:
        return jnp.zeros(dim, dt)
    res = match(m, d, sensor, table)
    matched = c.active & (res != 0)
    flip = res < 0
    nfound = jnp.sum(matched)
    if reduce == NETFORCE:
        # MuJoCo 4.0 leaves the sensor zero when nothing matches
        slot0 = jnp.where(nfound > 0, _net(d, spec, matched, flip, nfound, force), 0.0)
        return jnp.concatenate([slot0, jnp.zeros(dim - size, dt)])
    vals = _per_contact(d, spec, flip, nfound, force)
    if reduce == NONE:
        rank = jnp.cumsum(matched) - 1
        key = jnp.where(matched, rank, n).astype(dt)
    else:
        crit = c.dist if reduce == MINDIST else -jnp.sum(force[:, :3] ** 2, -1)
        key = jnp.where(matched, crit, jnp.inf)
    order = jnp.argsort(key, stable=True)
    k = min(num, n)
    rows = jnp.where((jnp.arange(k) < nfound)[:, None], vals[order[:k]], 0.0)
    out = rows.reshape(-1)
    return jnp.concatenate([out, jnp.zeros(dim - out.shape[0], dt)])


def contact_sensors(m: Model, d: State, ids: np.ndarray) -> list[jax.Array]:
    """Data of the contact sensors `ids`, one array per sensor."""
    from jaxsim.rne import contact_force

    table = _subtree_table(m)
    force = contact_force(m, d)
    return [contact_sensor(m, d, int(i), force, table) for i in ids]


def _geoms_of(m: Model, objtype: int, objid: int) -> range:
    if objtype == ObjType.BODY:
        adr, num = int(m.body_geomadr[objid]), int(m.body_geomnum[objid])
        return range(adr, adr + max(num, 0))
    return range(objid, objid + 1)


def distance_sensor(m: Model, d: State, sensor: int) -> jax.Array:
    """geomdist (1,), geomnormal (3,) or geomfromto (6,): the smallest distance over the
    geom pairs of the two objects (geoms or bodies), below the sensor's cutoff."""
    from jaxsim.collision.distance import geom_distances
    from jaxsim.types import SensorType

    dt = d.qpos.dtype
    cutoff = m.sensor_cutoff[sensor].astype(dt)
    g1 = _geoms_of(m, int(m.sensor_objtype[sensor]), int(m.sensor_objid[sensor]))
    g2 = _geoms_of(m, int(m.sensor_reftype[sensor]), int(m.sensor_refid[sensor]))
    dist, fromto = cutoff, jnp.zeros(6, dt)
    if len(g1) and len(g2):
        a, b = (x.reshape(-1) for x in np.meshgrid(np.array(g1), np.array(g2), indexing="ij"))
        dists, fromtos = geom_distances(m, d, a, b, cutoff)
        i = jnp.argmin(dists)  # the first of equal minima, as MuJoCo's strict comparison
        # a distance within rounding of the cutoff counts as reaching it: which side an
        # exact tie falls on is decided by the last bits of the GJK iterates, and the exact
        # distance is not below the cutoff
        found = dists[i] < cutoff - 8 * jnp.finfo(dt).eps * cutoff
        dist = jnp.where(found, dists[i], cutoff)
        fromto = jnp.where(found, fromtos[i], 0.0)
    typ = int(m.sensor_type[sensor])
    if typ == SensorType.GEOMDIST:
        return dist[None]
    if typ == SensorType.GEOMNORMAL:
        vec = fromto[3:] - fromto[:3]
        return jnp.where(jnp.any(vec != 0), math.normalize(vec), 0.0)
    return fromto


__all__ = ["contact_sensor", "contact_sensors", "distance_sensor", "inside", "match"]


# ----------------------------------------------------------------------------- tactile

# collider types with an analytic signed distance; meshes count only with an octree (SDF
# plugins), which jaxsim does not build: MuJoCo skips them, and so does this
_SDF_TYPES = (GeomType.PLANE, GeomType.SPHERE, GeomType.CAPSULE, GeomType.ELLIPSOID,
              GeomType.CYLINDER, GeomType.BOX)


def signed_distance(gtype: np.ndarray, size: jax.Array, x: jax.Array) -> jax.Array:
    """Signed distance (...,) of points x (..., 3), in the geoms' frames, to geoms of types
    `gtype` (...,) (static) and sizes (..., 3), as MuJoCo's geomDistance (the box interior
    through its radial field). Smooth where the distance is; safe at the singular points."""
    gt = np.broadcast_to(np.asarray(gtype), x.shape[:-1])
    s0, s1 = size[..., 0], size[..., 1]
    x0, x1, x2 = x[..., 0], x[..., 1], x[..., 2]
    out = x2  # plane
    if (gt == GeomType.SPHERE).any():
        out = jnp.where(gt == GeomType.SPHERE, math.norm(x) - s0, out)
    if (gt == GeomType.CAPSULE).any():
        a = jnp.stack([x0, x1, x2 - jnp.clip(x2, -s1, s1)], -1)
        out = jnp.where(gt == GeomType.CAPSULE, math.norm(a) - s0, out)
    if (gt == GeomType.ELLIPSOID).any():
        safe = jnp.where(size > 0, size, 1.0)
        a = x / safe
        k0, k1 = math.norm(a), math.norm(a / safe)
        out = jnp.where(gt == GeomType.ELLIPSOID, k0 * (k0 - 1.0) / jnp.where(k1 > 0, k1, 1.0),
                        out)
    if (gt == GeomType.CYLINDER).any():
        a0 = math.safe_sqrt(x0 * x0 + x1 * x1) - s0
        a1 = jnp.abs(x2) - s1
        b = jnp.stack([jnp.maximum(a0, 0.0), jnp.maximum(a1, 0.0)], -1)
        out = jnp.where(gt == GeomType.CYLINDER,
                        jnp.minimum(jnp.maximum(a0, a1), 0.0) + math.norm(b), out)
    if (gt == GeomType.BOX).any():
        a = jnp.abs(x) - size
        outside = jnp.any(a >= 0, axis=-1)
        far = math.norm(jnp.maximum(a, 0.0)) + jnp.minimum(jnp.max(a, axis=-1), 0.0)
        # inside: a unit field turning from radial to the face normals, cut by each face
        neg = jnp.where(a < 0, a, -1.0)
        field = math.normalize(-size / neg)
        t = -neg / jnp.where(field != 0, jnp.abs(field), 1.0)
        near = -jnp.min(t, axis=-1) * math.norm(field)
        out = jnp.where(gt == GeomType.BOX, jnp.where(outside, far, near), out)
    return out


def tactile(m: Model, d: State, sensor: int) -> jax.Array:
    """Tactile sensor data (3 nvert,): at each vertex of the sensor's mesh, placed in the
    frame of its geom, the deepest penetration into a geom touching the geom's weld body
    (the touching geoms are read from the contacts); the two slip channels stay zero (they
    need per-vertex normal frames, which `load` rejects)."""
    dt = d.qpos.dtype
    mesh, geom = int(m.sensor_objid[sensor]), int(m.sensor_refid[sensor])
    adr, n = int(m.mesh_vertadr[mesh]), int(m.mesh_vertnum[mesh])
    weld = _np(m.body_weldid)
    pw = int(weld[int(m.geom_bodyid[geom])])
    vert = m.mesh_vert[adr:adr + n].astype(dt)
    xpos = vert @ d.geom_xmat[geom].T + d.geom_xpos[geom]  # (n, 3)
    gtype = _np(m.geom_type)
    cand = np.nonzero(np.isin(gtype, _SDF_TYPES)
                      & (weld[_np(m.geom_bodyid)] != pw))[0]
    depth = jnp.zeros(n, dt)
    if len(cand) and d.contact.geom.shape[0]:
        c = d.contact
        g1, g2 = c.geom[:, 0], c.geom[:, 1]
        wb = jnp.asarray(weld[_np(m.geom_bodyid)])
        on = c.active[:, None]
        touch = (on & (wb[g1][:, None] == pw) & (g2[:, None] == cand[None])) | (
            on & (wb[g2][:, None] == pw) & (g1[:, None] == cand[None]))
        touching = jnp.any(touch, axis=0)  # (G,)
        rel = xpos[None] - d.geom_xpos[cand][:, None]  # (G, n, 3)
        lpos = jnp.einsum("gji,gnj->gni", d.geom_xmat[cand], rel)
        sdf = signed_distance(gtype[cand][:, None], m.geom_size[cand][:, None].astype(dt), lpos)
        pen = jnp.where(touching[:, None], -jnp.minimum(sdf, 0.0), 0.0)
        depth = jnp.max(pen, axis=0)
    return jnp.concatenate([depth, jnp.zeros(2 * n, dt)])
