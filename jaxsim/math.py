"""Quaternions, rotations, spatial algebra and tendon-wrapping geometry.

Conventions follow MuJoCo: quaternions are (w, x, y, z); rotation matrices map local to
global; 6D motion and force vectors are (rotation, translation); a com-based inertia is
10 numbers (Ixx, Iyy, Izz, Ixy, Ixz, Iyz, m*cx, m*cy, m*cz, m).

Every function is vectorised over leading axes and safe to differentiate at MuJoCo's
singular points (zero vectors, zero angles, coincident points): where MuJoCo branches on a
value, the branch not taken is fed finite inputs so its gradient cannot turn into NaN.
"""

from __future__ import annotations

from jaxsim import hostnp
from jaxsim.hostnp import jax, jnp  # numpy inside hostnp.host_backend(), see there

# MuJoCo's mjMINVAL: the smallest value it treats as non-zero.
MINVAL = 1e-15


# ------------------------------------------------------------------------------ guards


def safe_sqrt(x: jax.Array) -> jax.Array:
    """sqrt(x) for x > 0, else 0, with a finite gradient at and below zero."""
    pos = x > 0
    return jnp.where(pos, jnp.sqrt(jnp.where(pos, x, 1.0)), 0.0)


def safe_div(a: jax.Array, b: jax.Array) -> jax.Array:
    """a / b where b != 0, else 0 (the discarded branch still has a finite gradient)."""
    nz = b != 0
    return jnp.where(nz, a / jnp.where(nz, b, 1.0), 0.0)


def norm(x: jax.Array, axis: int = -1, keepdims: bool = False) -> jax.Array:
    """Euclidean norm whose gradient at the zero vector is zero instead of NaN."""
    return safe_sqrt(jnp.sum(x * x, axis=axis, keepdims=keepdims))


def normalize(x: jax.Array) -> jax.Array:
    """x / |x| with MuJoCo's fallback (1, 0, ...) below mjMINVAL (mju_normalize)."""
    n = norm(x, keepdims=True)
    small = n < MINVAL
    unit = jnp.zeros_like(x).at[..., 0].set(1.0)
    return jnp.where(small, unit, x / jnp.where(small, 1.0, n))


def normalize_with_norm(x: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(normalize(x), |x|), as mju_normalize3 returns the norm it divided by."""
    return normalize(x), norm(x)


def normalize_quat(q: jax.Array) -> jax.Array:
    """Unit quaternion; identity below mjMINVAL (mju_normalize4).

    As MuJoCo, q is kept as it is when |q| is within mjMINVAL of 1 (dividing would move it
    by a rounding error, and exact touches in collisions depend on such bits); the
    derivative is always that of q / |q|.
    """
    n = norm(q, keepdims=True)
    small = n < MINVAL
    unit = jnp.zeros_like(q).at[..., 0].set(1.0)
    scaled = q / jnp.where(small, 1.0, n)
    keep = jnp.abs(n - 1) <= MINVAL
    sg = jax.lax.stop_gradient
    same = sg(q) + (scaled - sg(scaled))  # the value of q, the slope of q / |q|
    return jnp.where(small, unit, jnp.where(keep, same, scaled))


def mm(a: jax.Array, b: jax.Array) -> jax.Array:
    """a @ b for small matrices (..., n, k) @ (..., k, p), as k broadcast multiply-adds.

    A batched product of few-by-few matrices runs far slower as a dot_general on the CPU
    (a small library call per world under vmap, and XLA turns a multiply-and-reduce back
    into one) than as an unrolled sum of products that XLA fuses with its neighbours.
    """
    out = a[..., :, 0, None] * b[..., None, 0, :]
    for j in range(1, a.shape[-1]):
        out = out + a[..., :, j, None] * b[..., None, j, :]
    return out


def mv(a: jax.Array, v: jax.Array) -> jax.Array:
    """a @ v for small matrices (..., n, k) and vectors (..., k), as k multiply-adds."""
    out = a[..., 0] * v[..., None, 0]
    for j in range(1, a.shape[-1]):
        out = out + a[..., j] * v[..., None, j]
    return out


# ------------------------------------------------------------------------- quaternions


def quat_mul(a: jax.Array, b: jax.Array) -> jax.Array:
    """Quaternion product a * b (mju_mulQuat)."""
    aw, ax, ay, az = jnp.moveaxis(a, -1, 0)
    bw, bx, by, bz = jnp.moveaxis(b, -1, 0)
    return stack_last(
        [
            aw * bw - ax * bx - ay * by - az * bz,
            aw * bx + ax * bw + ay * bz - az * by,
            aw * by - ax * bz + ay * bw + az * bx,
            aw * bz + ax * by - ay * bx + az * bw,
        ]
    )


def quat_neg(q: jax.Array) -> jax.Array:
    """Conjugate quaternion (mju_negQuat)."""
    return q * jnp.array([1.0, -1.0, -1.0, -1.0], q.dtype)


def no_fma(x: jax.Array) -> jax.Array:
    """x, rounded where it is computed. XLA:CPU contracts a product feeding a sum into one
    fused multiply-add (rounded once; MuJoCo's build has no FMA) and may rewrite 1/sqrt as
    rsqrt; an optimization barrier stops neither, a select on x == x that XLA cannot fold
    does (NaN stays NaN, the gradient passes through)."""
    if hostnp.on_host():
        return x
    return jnp.where(x == x, x, jnp.nan)


def quat_to_mat(q: jax.Array) -> jax.Array:
    """Rotation matrix of a unit quaternion (mju_quat2Mat).

    The diagonal sums the squares in pairs, (ww -+ yy) and (xx -+ zz), as MuJoCo 4.0's
    vectorised build rounds them, and the products are rounded before the sums (`no_fma`):
    in float64 the matrix matches MuJoCo's bit for bit (the multi-contact code decides
    near-ties on it)."""
    w, x, y, z = jnp.moveaxis(q, -1, 0)
    ww, wx, wy, wz = w * w, w * x, w * y, w * z
    xx, xy, xz, yy, yz, zz = x * x, x * y, x * z, y * y, y * z, z * z
    ww, wx, wy, wz, xx, xy, xz, yy, yz, zz = (no_fma(v) for v in (ww, wx, wy, wz, xx, xy,
                                                                   xz, yy, yz, zz))
    rows = [
        [(ww - yy) + (xx - zz), 2 * (xy - wz), 2 * (xz + wy)],
        [2 * (xy + wz), (ww + yy) - (xx + zz), 2 * (yz - wx)],
        [2 * (xz - wy), 2 * (yz + wx), (ww - yy) - (xx - zz)],
    ]
    return stack_last([e for r in rows for e in r]).reshape(*q.shape[:-1], 3, 3)


def rot_vec_quat(v: jax.Array, q: jax.Array) -> jax.Array:
    """Rotates v by the unit quaternion q (mju_rotVecQuat)."""
    q0, q1, q2, q3 = jnp.moveaxis(q, -1, 0)
    v0, v1, v2 = jnp.moveaxis(v, -1, 0)
    # t = q0 v + q_xyz x v, then v + 2 q_xyz x t, in mju_rotVecQuat's order of operations
    t0 = q0 * v0 + q2 * v2 - q3 * v1
    t1 = q0 * v1 + q3 * v0 - q1 * v2
    t2 = q0 * v2 + q1 * v1 - q2 * v0
    return stack_last([v0 + 2 * (q2 * t2 - q3 * t1), v1 + 2 * (q3 * t0 - q1 * t2),
                       v2 + 2 * (q1 * t1 - q2 * t0)])


def axis_angle_to_quat(axis: jax.Array, angle: jax.Array) -> jax.Array:
    """Quaternion of a rotation by angle about a unit axis (mju_axisAngle2Quat)."""
    half = 0.5 * angle[..., None]
    return jnp.concatenate([jnp.cos(half), axis * jnp.sin(half)], axis=-1)


def quat_to_vel(q: jax.Array, dt: jax.Array | float = 1.0) -> jax.Array:
    """Rotation vector (axis * angle / dt) of a unit quaternion (mju_quat2Vel).

    Near the identity the angle over sin(angle/2) tends to 2/w; that limit replaces the
    0/0 so both the value and the gradient stay finite at zero rotation.
    """
    v = q[..., 1:]
    w = q[..., 0]
    s = norm(v)
    speed = 2 * jnp.arctan2(s, w)
    speed = jnp.where(speed > jnp.pi, speed - 2 * jnp.pi, speed)
    small = s < MINVAL
    ratio = jnp.where(small, 2.0 / jnp.where(w == 0, 1.0, w), speed / jnp.where(small, 1.0, s))
    return v * (ratio / dt)[..., None]


def vel_to_quat(v: jax.Array) -> jax.Array:
    """Unit quaternion of the rotation vector v (axis * angle): the exponential map.

    The identity below mjMINVAL, as MuJoCo; sin(angle/2) / angle tends to 1/2, which keeps
    the value and the gradient finite at zero rotation.
    """
    th = norm(v)
    small = th < MINVAL
    half = 0.5 * th
    s = jnp.where(small, 0.5, jnp.sin(half) / jnp.where(small, 1.0, th))
    return jnp.concatenate([jnp.cos(half)[..., None], v * s[..., None]], axis=-1)


def sub_quat(qa: jax.Array, qb: jax.Array) -> jax.Array:
    """Rotation vector r with qb * quat(r) = qa (mju_subQuat)."""
    return quat_to_vel(quat_mul(quat_neg(qb), qa), 1.0)


# -------------------------------------------------------------------------- spatial


def inert_com(inert: jax.Array, mat: jax.Array, dif: jax.Array, mass: jax.Array) -> jax.Array:
    """Com-based 10-vector inertia from principal inertia, frame and offset (mju_inertCom)."""
    rot = mm(mat * inert[..., None, :], jnp.swapaxes(mat, -1, -2))  # mat diag(inert) mat'
    dx, dy, dz = dif[..., 0], dif[..., 1], dif[..., 2]
    return stack_last(
        [
            rot[..., 0, 0] + mass * (dy * dy + dz * dz),
            rot[..., 1, 1] + mass * (dx * dx + dz * dz),
            rot[..., 2, 2] + mass * (dx * dx + dy * dy),
            rot[..., 0, 1] - mass * dx * dy,
            rot[..., 0, 2] - mass * dx * dz,
            rot[..., 1, 2] - mass * dy * dz,
            mass * dx, mass * dy, mass * dz, mass,
        ]
    )


def inert_mat(i: jax.Array) -> jax.Array:
    """6x6 spatial inertia matrix of a com-based 10-vector (acts on (rot, lin) motions)."""
    ixx, iyy, izz, ixy, ixz, iyz, cx, cy, cz, m = jnp.moveaxis(i, -1, 0)
    z = jnp.zeros_like(m)
    rows = [
        [ixx, ixy, ixz, z, -cz, cy],
        [ixy, iyy, iyz, cz, z, -cx],
        [ixz, iyz, izz, -cy, cx, z],
        [z, cz, -cy, m, z, z],
        [-cz, z, cx, z, m, z],
        [cy, -cx, z, z, z, m],
    ]
    return jnp.stack([jnp.stack(r, axis=-1) for r in rows], axis=-2)


def mul_inert_vec(i: jax.Array, v: jax.Array) -> jax.Array:
    """Spatial inertia (10-vector) times a 6D motion (mju_mulInertVec)."""
    return jnp.einsum("...ij,...j->...i", inert_mat(i), v)


def stack_last(parts) -> jax.Array:
    """jnp.stack(parts, axis=-1) for a few component expressions, as one elementwise select
    over a new last axis. XLA:CPU emits a minor-axis concatenate as one loop per part
    writing strided outputs, and LLVM spends seconds vectorising each such kernel (the
    gymnasium ant's spatial cross products: 2-4 s apiece); the select computes every part
    for every entry, which costs nothing measurable at these sizes. The same expressions
    (XLA may contract a product and a sum into one FMA differently in the new fusion, a
    last-bit change); derivatives flow to the part each entry selects."""
    if hostnp.on_host():
        return jnp.stack(parts, axis=-1)
    parts = [jnp.asarray(p) for p in parts]
    dtype = jnp.result_type(*parts)
    shape = jnp.broadcast_shapes(*[p.shape for p in parts])
    out = shape + (len(parts),)
    dims = tuple(range(len(shape)))
    cases = [jax.lax.broadcast_in_dim(p.astype(dtype), out, dims[len(shape) - p.ndim:])
             for p in parts]
    which = jax.lax.broadcasted_iota(jnp.int32, out, len(shape))
    return jax.lax.select_n(which, *cases)


def cross3(a, b):
    """a x b on component tuples (one stack at the end: XLA then emits one small kernel
    instead of concatenating sliced products, which it duplicates per output)."""
    return (a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0])


def cross_motion(vel: jax.Array, v: jax.Array) -> jax.Array:
    """6D motion cross product vel x v (mju_crossMotion)."""
    c, x = tuple(jnp.moveaxis(vel, -1, 0)), tuple(jnp.moveaxis(v, -1, 0))
    rot = cross3(c[:3], x[:3])
    lin = [p + q for p, q in zip(cross3(c[:3], x[3:]), cross3(c[3:], x[:3]), strict=True)]
    return stack_last([*rot, *lin])


def cross_force(vel: jax.Array, f: jax.Array) -> jax.Array:
    """6D force cross product vel x* f (mju_crossForce)."""
    c, x = tuple(jnp.moveaxis(vel, -1, 0)), tuple(jnp.moveaxis(f, -1, 0))
    rot = [p + q for p, q in zip(cross3(c[:3], x[:3]), cross3(c[3:], x[3:]), strict=True)]
    lin = cross3(c[:3], x[3:])
    return stack_last([*rot, *lin])


# ------------------------------------------------------------------ tendon wrapping


def _dot2(a, b):
    return a[..., 0] * b[..., 0] + a[..., 1] * b[..., 1]


def _is_intersect(p1, p2, p3, p4):
    """Whether 2D segments p1-p2 and p3-p4 cross (MuJoCo's is_intersect)."""
    det = (p4[..., 1] - p3[..., 1]) * (p2[..., 0] - p1[..., 0]) - (
        p4[..., 0] - p3[..., 0]
    ) * (p2[..., 1] - p1[..., 1])
    ok = jnp.abs(det) >= MINVAL
    sdet = jnp.where(ok, det, 1.0)
    a = (
        (p4[..., 0] - p3[..., 0]) * (p1[..., 1] - p3[..., 1])
        - (p4[..., 1] - p3[..., 1]) * (p1[..., 0] - p3[..., 0])
    ) / sdet
    b = (
        (p2[..., 0] - p1[..., 0]) * (p1[..., 1] - p3[..., 1])
        - (p2[..., 1] - p1[..., 1]) * (p1[..., 0] - p3[..., 0])
    ) / sdet
    return ok & (a >= 0) & (a <= 1) & (b >= 0) & (b <= 1)


def _length_circle(p0, p1, ind, radius):
    """Arc length from p0 to p1 on a circle, direction chosen by ind (length_circle).

    atan2(|cross|, dot) equals MuJoCo's acos of the normalised dot product but keeps a
    finite derivative when the two points are (anti)parallel.
    """
    cross = p0[..., 1] * p1[..., 0] - p0[..., 0] * p1[..., 1]
    dot = _dot2(p0, p1)
    # atan2(0, 0) has a NaN gradient; it only occurs in branches that are discarded
    dot = jnp.where((cross == 0) & (dot == 0), 1.0, dot)
    angle = jnp.arctan2(jnp.abs(cross), dot)
    # MuJoCo evaluates acos of the normalised dot product, which loses ~1e-8 near 0 and pi;
    # take its value (for agreement) and the well-conditioned atan2 derivative
    n0 = normalize(p0)
    n1 = normalize(p1)
    acos = jnp.arccos(jnp.clip(_dot2(n0, n1), -1.0, 1.0))
    angle = angle + jax.lax.stop_gradient(acos - angle)
    flip = ((cross > 0) & ind) | ((cross < 0) & ~ind)
    return radius * jnp.where(flip, 2 * jnp.pi - angle, angle)


def _wrap_circle(end, side, has_side, radius):
    """2D wrap of segment end[0:2]-end[2:4] around a circle at the origin (wrap_circle).

    Returns (length, pnt) with length -1 where the segment does not wrap.
    """
    e0, e1 = end[..., 0:2], end[..., 2:4]
    sqlen0 = _dot2(e0, e0)
    sqlen1 = _dot2(e1, e1)
    sqrad = radius * radius
    nowrap = (sqlen0 < sqrad) | (sqlen1 < sqrad) | (radius < MINVAL)

    dif = e1 - e0
    dd = _dot2(dif, dif)
    nowrap |= dd < MINVAL
    a = jnp.clip(-_dot2(dif, e0) / jnp.where(dd < MINVAL, 1.0, dd), 0.0, 1.0)
    near = a[..., None] * dif + e0
    clear = _dot2(near, near) > sqrad
    nowrap |= clear & (~has_side | (_dot2(side, near) >= 0))

    sqrt0 = safe_sqrt(sqlen0 - sqrad)
    sqrt1 = safe_sqrt(sqlen1 - sqrad)
    l0 = jnp.where(sqlen0 > 0, sqlen0, 1.0)
    l1 = jnp.where(sqlen1 > 0, sqlen1, 1.0)

    sols, goods = [], []
    for sgn in (1.0, -1.0):
        s0 = jnp.stack(
            [
                (e0[..., 0] * sqrad + sgn * radius * e0[..., 1] * sqrt0) / l0,
                (e0[..., 1] * sqrad - sgn * radius * e0[..., 0] * sqrt0) / l0,
            ],
            axis=-1,
        )
        s1 = jnp.stack(
            [
                (e1[..., 0] * sqrad - sgn * radius * e1[..., 1] * sqrt1) / l1,
                (e1[..., 1] * sqrad + sgn * radius * e1[..., 0] * sqrt1) / l1,
            ],
            axis=-1,
        )
        good_side = _dot2(normalize(s0 + s1), side)
        diff = s0 - s1
        good = jnp.where(has_side, good_side, -_dot2(diff, diff))
        good = jnp.where(_is_intersect(e0, s0, e1, s1), -10000.0, good)
        sols.append((s0, s1))
        goods.append(good)

    pick0 = goods[0] > goods[1]
    p0 = jnp.where(pick0[..., None], sols[0][0], sols[1][0])
    p1 = jnp.where(pick0[..., None], sols[0][1], sols[1][1])
    nowrap |= _is_intersect(e0, p0, e1, p1)
    length = _length_circle(p0, p1, ~pick0, radius)
    # a side site: the shortest path homotopic to e0 -> side -> e1 (MuJoCo 4.0)
    s_len, s_pnt, s_wrap = _wrap_circle_side(e0, e1, side, radius, sqrt0, sqrt1)
    nowrap = jnp.where(has_side, ~s_wrap | (sqlen0 < sqrad) | (sqlen1 < sqrad)
                       | (radius < MINVAL), nowrap)
    length = jnp.where(has_side, s_len, length)
    pnt = jnp.where(has_side[..., None], s_pnt, jnp.concatenate([p0, p1], axis=-1))
    return jnp.where(nowrap, -1.0, length), pnt


def _wrap_circle_side(e0, e1, side, radius, sqrt0, sqrt1):
    """Wrap with a side site (outside the circle): the path goes around the circle the way
    the polyline e0 -> side -> e1 winds around its centre, tangent from each end point; no
    wrap when the winding angle is used up by the two tangent angles (the straight segment
    then winds that way too). Returns (arc length, tangent points (..., 4), wraps)."""
    def ang(v):
        return jnp.arctan2(v[..., 1], v[..., 0])

    def wrap_pi(a):
        return a - 2 * jnp.pi * jnp.floor((a + jnp.pi) / (2 * jnp.pi))

    t0, t1, ts = ang(e0), ang(e1), ang(side)
    winding = wrap_pi(ts - t0) + wrap_pi(t1 - ts)
    r = jnp.maximum(radius, MINVAL)
    a0 = jnp.arctan2(sqrt0, r)  # angle from an end point's direction to its tangent point
    a1 = jnp.arctan2(sqrt1, r)
    arc = jnp.abs(winding) - a0 - a1
    sgn = jnp.where(winding >= 0, 1.0, -1.0)
    q0, q1 = t0 + sgn * a0, t1 - sgn * a1
    pnt = jnp.stack([jnp.cos(q0), jnp.sin(q0), jnp.cos(q1), jnp.sin(q1)], axis=-1)
    return radius * jnp.maximum(arc, 0.0), radius[..., None] * pnt, arc > 0


def _wrap_inside(end, radius):
    """2D wrap from inside a circle: tendon touches the circle once (wrap_inside).

    Solves asin(A z) + asin(B z) - 2 asin(z) + G = 0 by at most 20 Newton steps from
    z = 1 - 1e-7, exactly as MuJoCo does, including its fallback to the averaged point.
    Returns (length, pnt) with length 0 if wrapping, -1 if not.
    """
    maxiter, tol = 20, 1e-6
    e0, e1 = end[..., 0:2], end[..., 2:4]
    len0 = norm(e0)
    len1 = norm(e1)
    dif = e1 - e0
    dd = _dot2(dif, dif)
    nowrap = (len0 <= radius) | (len1 <= radius) | (radius < MINVAL)
    nowrap |= (len0 < MINVAL) | (len1 < MINVAL)
    a = -_dot2(dif, e0) / jnp.where(dd > MINVAL, dd, 1.0)
    near = e0 + a[..., None] * dif
    nowrap |= (dd > MINVAL) & (a > 0) & (a < 1) & (norm(near) <= radius)

    default = normalize(0.5 * (e0 + e1)) * radius[..., None]
    default = jnp.concatenate([default, default], axis=-1)

    l0 = jnp.where(len0 > 0, len0, 1.0)
    l1 = jnp.where(len1 > 0, len1, 1.0)
    A = radius / l0
    B = radius / l1
    cosg = (len0 * len0 + len1 * len1 - dd) / (2 * l0 * l1)
    nowrap |= cosg < -1 + MINVAL
    use_default = cosg > 1 - MINVAL
    G = jnp.arccos(jnp.clip(cosg, -1 + MINVAL, 1 - MINVAL))
    A = jnp.where(nowrap | use_default, 0.5, jnp.clip(A, 0.0, 1.0))
    B = jnp.where(nowrap | use_default, 0.5, jnp.clip(B, 0.0, 1.0))

    def fun(z):
        return jnp.arcsin(A * z) + jnp.arcsin(B * z) - 2 * jnp.arcsin(z) + G

    z = jnp.full_like(radius, 1 - 1e-7)
    f = fun(z)
    use_default |= f > 0
    # status: 0 iterating, 1 converged, 2 fell back to the default point
    status = jnp.where(use_default, 2, jnp.where(jnp.abs(f) <= tol, 1, 0))

    def body(i, carry):
        z, f, status = carry
        run = status == 0
        df = (
            A / jnp.maximum(MINVAL, safe_sqrt(1 - z * z * A * A))
            + B / jnp.maximum(MINVAL, safe_sqrt(1 - z * z * B * B))
            - 2 / jnp.maximum(MINVAL, safe_sqrt(1 - z * z))
        )
        bad = df > -MINVAL
        z1 = z - f / jnp.where(bad, -1.0, df)
        bad |= z1 > z
        # keep asin off +-1, where its derivative is infinite (MuJoCo's own path stays
        # strictly inside; steps that leave it are rejected as bad anyway)
        z1 = jnp.clip(z1, -1.0 + 1e-12, 1.0 - 1e-12)
        f1 = fun(z1)
        bad |= f1 > tol
        # MuJoCo's loop counter reaches maxiter when the last step converges: no credit
        conv = (jnp.abs(f1) <= tol) & (i < maxiter - 1)
        new_status = jnp.where(bad, 2, jnp.where(conv, 1, 0))
        z = jnp.where(run & ~bad, z1, z)
        f = jnp.where(run & ~bad, f1, f)
        return z, f, jnp.where(run, new_status, status)

    z, f, status = jax.lax.fori_loop(0, maxiter, body, (z, f, status))
    use_default |= status != 1

    ccw = e0[..., 0] * e1[..., 1] - e0[..., 1] * e1[..., 0] > 0
    vec = normalize(jnp.where(ccw[..., None], e0, e1))
    ang = jnp.arcsin(z) - jnp.arcsin(jnp.where(ccw, A, B) * z)
    c, s = jnp.cos(ang), jnp.sin(ang)
    pnt = radius[..., None] * jnp.stack(
        [c * vec[..., 0] - s * vec[..., 1], s * vec[..., 0] + c * vec[..., 1]], axis=-1
    )
    pnt = jnp.concatenate([pnt, pnt], axis=-1)
    pnt = jnp.where(use_default[..., None], default, pnt)
    return jnp.where(nowrap, -1.0, 0.0), pnt


def wrap(x0, x1, xpos, xmat, radius, is_sphere, side, has_side):
    """Wraps the segment x0-x1 around a sphere or cylinder (mju_wrap), vectorised.

    Args:
      x0, x1: (..., 3) segment end points.
      xpos, xmat: (..., 3), (..., 3, 3) frame of the wrapping geom.
      radius: (...,) geom radius.
      is_sphere: (...,) bool, False for cylinders.
      side: (..., 3) side-site position (ignored where has_side is False).
      has_side: (...,) bool.

    Returns:
      (length, wpnt): wrapped arc length, -1 where the segment does not wrap; and the
      (..., 6) pair of tangent points in the global frame.
    """
    p0 = jnp.einsum("...ji,...j->...i", xmat, x0 - xpos)
    p1 = jnp.einsum("...ji,...j->...i", xmat, x1 - xpos)
    nowrap = (norm(p0) < MINVAL) | (norm(p1) < MINVAL)

    # sphere: 2D frame in the plane through the centre, p0 and p1
    ax0 = normalize(p0)
    normal, nrm = normalize_with_norm(jnp.cross(p0, p1))
    a = jnp.abs(ax0)
    i1 = (a[..., 1] > a[..., 0]) & (a[..., 1] > a[..., 2])
    i2 = (a[..., 2] > a[..., 0]) & (a[..., 2] > a[..., 1])
    idx = jnp.where(i2, 2, jnp.where(i1, 1, 0))
    alt = 1.0 - jax.nn.one_hot(idx, 3, dtype=p0.dtype)
    alt_normal = normalize(jnp.cross(ax0, alt))
    normal = jnp.where((nrm < MINVAL)[..., None], alt_normal, normal)
    ax1 = normalize(jnp.cross(normal, ax0))

    ex = jnp.zeros_like(p0).at[..., 0].set(1.0)
    ey = jnp.zeros_like(p0).at[..., 1].set(1.0)
    sph = is_sphere[..., None]
    ax0 = jnp.where(sph, ax0, ex)
    ax1 = jnp.where(sph, ax1, ey)

    d = jnp.stack(
        [
            jnp.sum(p0 * ax0, -1),
            jnp.sum(p0 * ax1, -1),
            jnp.sum(p1 * ax0, -1),
            jnp.sum(p1 * ax1, -1),
        ],
        axis=-1,
    )
    s = jnp.einsum("...ji,...j->...i", xmat, side - xpos)
    sd = jnp.stack([jnp.sum(s * ax0, -1), jnp.sum(s * ax1, -1)], axis=-1)
    sd = normalize(sd) * radius[..., None]

    len_in, pnt_in = _wrap_inside(d, radius)
    len_c, pnt_c = _wrap_circle(d, sd, has_side, radius)
    inside = has_side & (norm(s) < radius)
    wlen = jnp.where(inside, len_in, len_c)
    pnt = jnp.where(inside[..., None], pnt_in, pnt_c)
    nowrap |= wlen < 0

    r0 = ax0 * pnt[..., 0:1] + ax1 * pnt[..., 1:2]
    r1 = ax0 * pnt[..., 2:3] + ax1 * pnt[..., 3:4]

    # cylinder: place the tangent points along z in proportion to the path length
    L0 = norm(p0[..., :2] - r0[..., :2])
    L1 = norm(p1[..., :2] - r1[..., :2])
    tot = L0 + wlen + L1
    tot = jnp.where(tot > 0, tot, 1.0)
    z0 = p0[..., 2] + (p1[..., 2] - p0[..., 2]) * L0 / tot
    z1 = p0[..., 2] + (p1[..., 2] - p0[..., 2]) * (L0 + wlen) / tot
    height = jnp.abs(z1 - z0)
    cyl_len = safe_sqrt(wlen * wlen + height * height)
    r0 = jnp.where(sph, r0, r0.at[..., 2].set(z0))
    r1 = jnp.where(sph, r1, r1.at[..., 2].set(z1))
    wlen = jnp.where(is_sphere, wlen, cyl_len)

    w0 = jnp.einsum("...ij,...j->...i", xmat, r0) + xpos
    w1 = jnp.einsum("...ij,...j->...i", xmat, r1) + xpos
    return jnp.where(nowrap, -1.0, wlen), jnp.concatenate([w0, w1], axis=-1)
