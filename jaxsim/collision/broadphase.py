"""MuJoCo's broad phase as a run-time mask on the candidate body pairs (mj_broadphase).

MuJoCo sweeps and prunes body bounding boxes ("AAMMs": per geom the tighter of the
rotated local box and the bounding sphere, padded by margin + gap) taken along the rows
of the principal-axes frame of the geom centres (mju_eig3 of their covariance). Two
bodies pair when their boxes overlap on the sweep axis compared in float32 and on the
two other axes in full precision, touching included. Grids of touching objects depend
on it: meshes whose float32 vertices overlap by 1e-9 while their boxes are apart by
1e-10 in double give MuJoCo no contact (and those whose boxes touch in float32 on the
sweep axis do), so the driver applies the same test to the pairs it enumerates; pairs
with the world body, with a dof-less body carrying a plane, and explicit `<pair>`s skip
it as in MuJoCo. (The MuJoCo 4.0 binary was probed for the comparison rules: ties on
the sweep axis pair, the secondary axes are not rounded.)

Everything here is a mask: no gradient flows through it.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxsim import math
from jaxsim.types import EnableBit, GeomType, Model, State

EIG_EPS = 1e-12  # MuJoCo's eigEPS (mjMINVAL * 1000)
EIG_ITER = 500


def _quat2mat(q):
    """mju_quat2Mat's arithmetic (the frame's last bits decide exact touches)."""
    w, x, y, z = q
    return jnp.stack([
        jnp.stack([w * w + x * x - y * y - z * z, 2 * (x * y - w * z), 2 * (x * z + w * y)]),
        jnp.stack([2 * (x * y + w * z), w * w - x * x + y * y - z * z, 2 * (y * z - w * x)]),
        jnp.stack([2 * (x * z - w * y), 2 * (y * z + w * x), w * w - x * x - y * y + z * z]),
    ])


def _mulquat(a, b):
    return jnp.stack([
        a[0] * b[0] - a[1] * b[1] - a[2] * b[2] - a[3] * b[3],
        a[0] * b[1] + a[1] * b[0] + a[2] * b[3] - a[3] * b[2],
        a[0] * b[2] - a[1] * b[3] + a[2] * b[0] + a[3] * b[1],
        a[0] * b[3] + a[1] * b[2] - a[2] * b[1] + a[3] * b[0],
    ])


def _normalize4(q):
    n = jnp.sqrt(jnp.sum(q * q))
    return jnp.where(n < 1e-15, jnp.array([1.0, 0, 0, 0], q.dtype), q / jnp.where(n > 0, n, 1))


def _rotated(cov: jax.Array, q: jax.Array) -> jax.Array:
    """R' cov R for the rotation of quaternion q."""
    r = _quat2mat(q)
    return r.T @ cov @ r


def _jacobi(cov: jax.Array):
    """mju_eig3's Jacobi rotations on a symmetric 3 x 3 matrix: (quaternion, stopped,
    iterations)."""
    dt = cov.dtype
    eps = jnp.asarray(EIG_EPS, dt)
    low = jnp.finfo(dt).bits < 64  # float64 keeps MuJoCo's rules exactly

    def body(st):
        q, _, it = st
        dmat = _rotated(cov, q)
        a01, a02, a12 = jnp.abs(dmat[0, 1]), jnp.abs(dmat[0, 2]), jnp.abs(dmat[1, 2])
        first = (a01 > a02) & (a01 > a12)
        second = ~first & (a02 > a12)
        rk = jnp.where(first | second, 0, 1)
        ck = jnp.where(first, 1, 2)
        rotk = jnp.where(first, 2, jnp.where(second, 1, 0))
        off = dmat[rk, ck]
        stop = jnp.abs(off) < eps
        if low:
            # below float64, MuJoCo's absolute thresholds are out of reach (1 - 1e-12
            # rounds to 1): stop once the off-diagonal entry is rounding noise of the
            # diagonal ones, or the loop would run to EIG_ITER in every world
            noise = 8 * jnp.finfo(dt).eps * (jnp.abs(dmat[rk, rk]) + jnp.abs(dmat[ck, ck]))
            stop = stop | (jnp.abs(off) <= noise)
        offs = jnp.where(stop, 1.0, off)
        tau = (dmat[ck, ck] - dmat[rk, rk]) / (2 * offs)
        root = jnp.sqrt(1 + tau * tau)
        t = jnp.where(tau >= 0, 1.0 / (tau + root), -1.0 / (-tau + root))
        c = 1.0 / jnp.sqrt(1 + t * t)
        stop = stop | (c > 1.0 - eps)
        if low:
            # a rotation too small for the working precision: c rounds to 1, s to 0, and
            # the loop would repeat the same step to EIG_ITER (it did in nearly every
            # world of the gymnasium humanoid in float32)
            stop = stop | (c >= 1.0)
        s = jnp.sqrt(jnp.maximum(0.5 - 0.5 * c, 0.0))
        s = jnp.where(tau >= 0, -s, s)
        s = jnp.where(rotk == 1, -s, s)
        rot = jnp.zeros(4, dt).at[rotk + 1].set(s)
        rot = _normalize4(rot.at[0].set(jnp.sqrt(jnp.maximum(1.0 - s * s, 0.0))))
        qn = _normalize4(_mulquat(q, rot))
        return jnp.where(stop, q, qn), stop, it + 1

    q0 = jnp.array([1.0, 0.0, 0.0, 0.0], dt)
    return lax.while_loop(lambda st: ~st[1] & (st[2] < EIG_ITER), body,
                          (q0, jnp.asarray(False), jnp.asarray(0)))


def eig3_frame(cov: jax.Array) -> jax.Array:
    """MuJoCo's mju_eig3 on a symmetric 3 x 3 matrix: the rotation whose columns are the
    eigenvectors, eigenvalues in decreasing order (Jacobi rotations accumulated in a
    quaternion, MuJoCo's stopping rules and ordering swaps)."""
    dt = cov.dtype
    eps = jnp.asarray(EIG_EPS, dt)
    q, _, _ = _jacobi(cov)
    val = jnp.diagonal(_rotated(cov, q))
    c45 = jnp.asarray(0.707106781186548, dt)
    for j in range(3):  # MuJoCo's three bubble-sort passes (0, 1, 0)
        j1 = j % 2
        swap = val[j1] + eps < val[j1 + 1]
        val = jnp.where(swap, val.at[j1].set(val[j1 + 1]).at[j1 + 1].set(val[j1]), val)
        rot = jnp.zeros(4, dt).at[0].set(c45).at[(j1 + 2) % 3 + 1].set(c45)
        q = jnp.where(swap, _normalize4(_mulquat(q, rot)), q)
    return _quat2mat(q)


class Static:
    """Host-side structure: which bodies take part and which pairs skip the sweep."""

    def __init__(self, m: Model):
        nb = m.nbody
        gbody = np.asarray(m.geom_bodyid, np.int64)
        bct = np.zeros(nb, np.int64)
        bca = np.zeros(nb, np.int64)
        np.bitwise_or.at(bct, gbody, np.asarray(m.geom_contype, np.int64))
        np.bitwise_or.at(bca, gbody, np.asarray(m.geom_conaffinity, np.int64))
        collide = (bct | bca) != 0
        weld = np.asarray(m.body_weldid, np.int64)
        dofnum = np.asarray(m.body_dofnum, np.int64)[weld]
        plane = np.zeros(nb, bool)
        plane[gbody[np.asarray(m.geom_type) == GeomType.PLANE]] = True
        self.always = collide & ((np.arange(nb) == 0) & (np.bincount(gbody, minlength=nb) > 0)
                                 | (dofnum == 0) & plane)
        self.nonworld = np.nonzero(gbody != 0)[0]  # geoms whose centres set the frame
        self.vertnonworld = np.nonzero(np.asarray(m.flex_vertbodyid, np.int64) != 0)[0]
        self.gbody = gbody

def body_boxes(m: Model, d: State, st: Static):
    """Per body: its AAMM (min 3, max 3) in MuJoCo's broad-phase frame."""
    xpos = lax.stop_gradient(d.geom_xpos)
    xmat = lax.stop_gradient(d.geom_xmat)
    dt = xpos.dtype
    nb = m.nbody
    p = xpos[st.nonworld]
    if len(st.vertnonworld):
        from jaxsim import flex

        vx = lax.stop_gradient(flex.vertex_xpos(m, d))
        p = jnp.concatenate([p, vx[st.vertnonworld]])
    if p.shape[0] == 0:
        frame = jnp.eye(3, dtype=dt)
    else:
        cen = jnp.mean(p, 0)
        dif = p - cen
        cov = dif.T @ dif / p.shape[0]
        frame = eig3_frame(cov)
    aabb = lax.stop_gradient(jnp.asarray(m.geom_aabb, dt))
    if m.opt.enableflags & EnableBit.OVERRIDE:
        margin = jnp.full((m.ngeom,), 0.5 * m.opt.o_margin, dt)
    else:
        margin = lax.stop_gradient(m.geom_margin + m.geom_gap).astype(dt)
    # the 3 x 3 products as multiply-adds (math.mm / mv; MuJoCo's order of the terms), not
    # as einsums: XLA:CPU made tiny batched dots of those (the gymnasium humanoid at batch
    # 1024: 3.7 -> 1.4 ms per call; the ant 3.0 -> 1.3)
    pos = xpos + math.mv(xmat, aabb[:, :3])
    # makeAAMM reads the frame by rows; the box half-widths along them
    acen = math.mm(pos, frame.T)
    half = aabb[:, None, 3:] * math.mm(frame[None], xmat)
    ahalf = jnp.abs(half[..., 0]) + jnp.abs(half[..., 1]) + jnp.abs(half[..., 2])
    rcen = math.mm(xpos, frame.T)
    rb = lax.stop_gradient(jnp.asarray(m.geom_rbound, dt))[:, None]
    lo = jnp.maximum(rcen - rb, acen - ahalf) - margin[:, None]
    hi = jnp.minimum(rcen + rb, acen + ahalf) + margin[:, None]
    seg = jnp.asarray(st.gbody)
    blo = jax.ops.segment_min(lo, seg, num_segments=nb)
    bhi = jax.ops.segment_max(hi, seg, num_segments=nb)
    return blo, bhi


def sap_keep(blo, bhi, b1, b2) -> jax.Array:
    """MuJoCo's sweep-and-prune verdict for body pairs (b1, b2): closed intervals overlap
    on the sweep axis in float32 and on the two other axes in full precision."""
    f32 = lambda x: x.astype(jnp.float32)  # noqa: E731
    lo1, hi1, lo2, hi2 = blo[b1], bhi[b1], blo[b2], bhi[b2]
    ok0 = (f32(lo1[..., 0]) <= f32(hi2[..., 0])) & (f32(lo2[..., 0]) <= f32(hi1[..., 0]))
    # the two other axes as explicit conjunctions (a reduction over an axis of 2 is a kernel
    # of its own on the CPU: 6 ms per call for the gymnasium humanoid's 190 pairs x 1024)
    ok1 = (lo1[..., 1] <= hi2[..., 1]) & (lo2[..., 1] <= hi1[..., 1])
    ok2 = (lo1[..., 2] <= hi2[..., 2]) & (lo2[..., 2] <= hi1[..., 2])
    return ok0 & ok1 & ok2


def keep(st: Static, boxes, g1, g2, explicit=False) -> jax.Array:
    """Geom pairs (g1, g2) that MuJoCo's broad phase passes: explicit `<pair>`s, pairs with
    an always-colliding body, and the others whose body boxes overlap (`boxes` from
    body_boxes). Geom ids static (numpy) or traced."""
    xp = np if isinstance(g1, np.ndarray) and isinstance(g2, np.ndarray) else jnp
    gbody, always = xp.asarray(st.gbody), xp.asarray(st.always)
    b1, b2 = gbody[g1], gbody[g2]
    free = always[b1] | always[b2] | explicit
    return jnp.asarray(free) | sap_keep(*boxes, jnp.asarray(b1), jnp.asarray(b2))
