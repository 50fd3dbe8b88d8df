"""Host-side (numpy, float64) rotations and frames used by the compiler.

These follow the conventions of MuJoCo's compiler exactly (quaternions w,x,y,z; the same
branch choices when converting matrices to quaternions and in the 3x3 eigen-decomposition)
so compiled constants agree with MuJoCo's to rounding error.
"""

from __future__ import annotations

import math

import numpy as np

EPS = 1e-14  # the compiler's minimum value in normalisations


def normvec(v: np.ndarray) -> tuple[np.ndarray, float]:
    """Normalises v unless its squared norm is below EPS or it is already unit to EPS."""
    v = np.array(v, dtype=np.float64)
    n2 = float(np.dot(v, v))
    if n2 < EPS:
        return v, 0.0
    n = math.sqrt(n2)
    if abs(n - 1.0) > EPS:
        v = v / n
    return v, n


def quat2mat(q) -> np.ndarray:
    q = np.asarray(q, dtype=np.float64)
    if q[0] == 1 and q[1] == 0 and q[2] == 0 and q[3] == 0:
        return np.eye(3)
    w, x, y, z = q
    return np.array([
        [w * w + x * x - y * y - z * z, 2 * (x * y - w * z), 2 * (x * z + w * y)],
        [2 * (x * y + w * z), w * w - x * x + y * y - z * z, 2 * (y * z - w * x)],
        [2 * (x * z - w * y), 2 * (y * z + w * x), w * w - x * x - y * y + z * z],
    ])


def mulquat(a, b) -> np.ndarray:
    """Product of two unit quaternions, renormalised as the compiler does."""
    a0, a1, a2, a3 = a
    b0, b1, b2, b3 = b
    q = np.array([
        a0 * b0 - a1 * b1 - a2 * b2 - a3 * b3,
        a0 * b1 + a1 * b0 + a2 * b3 - a3 * b2,
        a0 * b2 - a1 * b3 + a2 * b0 + a3 * b1,
        a0 * b3 + a1 * b2 - a2 * b1 + a3 * b0,
    ])
    return normvec(q)[0]


def negquat(q) -> np.ndarray:
    return np.array([q[0], -q[1], -q[2], -q[3]], dtype=np.float64)


def rotvec(q, v) -> np.ndarray:
    return quat2mat(q) @ np.asarray(v, dtype=np.float64)


def frame2quat(x, y, z) -> np.ndarray:
    """Quaternion of the frame whose axes (columns) are x, y, z."""
    m = (x, y, z)  # m[c][r]
    q = np.zeros(4)
    if m[0][0] + m[1][1] + m[2][2] > 0:
        q[0] = 0.5 * math.sqrt(1 + m[0][0] + m[1][1] + m[2][2])
        q[1] = 0.25 * (m[1][2] - m[2][1]) / q[0]
        q[2] = 0.25 * (m[2][0] - m[0][2]) / q[0]
        q[3] = 0.25 * (m[0][1] - m[1][0]) / q[0]
    elif m[0][0] > m[1][1] and m[0][0] > m[2][2]:
        q[1] = 0.5 * math.sqrt(1 + m[0][0] - m[1][1] - m[2][2])
        q[0] = 0.25 * (m[1][2] - m[2][1]) / q[1]
        q[2] = 0.25 * (m[1][0] + m[0][1]) / q[1]
        q[3] = 0.25 * (m[2][0] + m[0][2]) / q[1]
    elif m[1][1] > m[2][2]:
        q[2] = 0.5 * math.sqrt(1 - m[0][0] + m[1][1] - m[2][2])
        q[0] = 0.25 * (m[2][0] - m[0][2]) / q[2]
        q[1] = 0.25 * (m[1][0] + m[0][1]) / q[2]
        q[3] = 0.25 * (m[2][1] + m[1][2]) / q[2]
    else:
        q[3] = 0.5 * math.sqrt(1 - m[0][0] - m[1][1] + m[2][2])
        q[0] = 0.25 * (m[0][1] - m[1][0]) / q[3]
        q[1] = 0.25 * (m[2][0] + m[0][2]) / q[3]
        q[2] = 0.25 * (m[2][1] + m[1][2]) / q[3]
    return normvec(q)[0]


def mat2quat(mat) -> np.ndarray:
    mat = np.asarray(mat, dtype=np.float64)
    return frame2quat(mat[:, 0], mat[:, 1], mat[:, 2])


def z2quat(vec) -> np.ndarray:
    """Minimal rotation taking (0,0,1) to vec (vec normalised)."""
    vec = np.asarray(vec, dtype=np.float64)
    axis, s = normvec(np.cross([0.0, 0.0, 1.0], vec))
    if s < 1e-10:
        axis = np.array([1.0, 0.0, 0.0])
    ang = math.atan2(s, vec[2])
    return np.array([math.cos(ang / 2), *(axis * math.sin(ang / 2))])


def axisangle2quat(axis, angle: float) -> np.ndarray:
    axis, n = normvec(axis)
    if n < EPS:
        raise ValueError("axisangle too small")
    return np.array([math.cos(angle / 2), *(axis * math.sin(angle / 2))])


def euler2quat(euler, seq: str) -> np.ndarray:
    q = np.array([1.0, 0.0, 0.0, 0.0])
    for ang, ax in zip(euler, seq, strict=True):
        r = np.array([math.cos(ang / 2), 0.0, 0.0, 0.0])
        r["xyz".index(ax.lower()) + 1] = math.sin(ang / 2)
        q = mulquat(q, r) if ax.islower() else mulquat(r, q)
    return normvec(q)[0]


def xyaxes2quat(xy) -> np.ndarray:
    x, nx = normvec(xy[:3])
    if nx < EPS:
        raise ValueError("xaxis too small")
    y = np.asarray(xy[3:], dtype=np.float64)
    y = y - x * np.dot(x, y)
    y, ny = normvec(y)
    if ny < EPS:
        raise ValueError("yaxis too small")
    z, nz = normvec(np.cross(x, y))
    if nz < EPS:
        raise ValueError("cross(xaxis, yaxis) too small")
    return frame2quat(x, y, z)


def frameaccum(pos, quat, childpos, childquat) -> tuple[np.ndarray, np.ndarray]:
    """Composes frame (pos, quat) with a child frame expressed in it."""
    return (np.asarray(pos, float) + quat2mat(quat) @ np.asarray(childpos, float),
            mulquat(quat, childquat))


def frameinvert(pos, quat) -> tuple[np.ndarray, np.ndarray]:
    q = np.asarray(quat, float)
    return -(quat2mat(q).T @ np.asarray(pos, float)), negquat(q)


def localframe(pos, quat, parent_pos, parent_quat) -> tuple[np.ndarray, np.ndarray]:
    """Expresses a global frame in a parent frame."""
    ip, iq = frameinvert(parent_pos, parent_quat)
    return frameaccum(ip, iq, pos, quat)


def eig3(mat) -> tuple[np.ndarray, np.ndarray]:
    """Eigenvalues (decreasing) and the quaternion of the eigenvector frame of a symmetric
    3x3 matrix, by the compiler's quaternion Jacobi iteration, so that the principal frame
    matches MuJoCo's. MuJoCo 4.0 iterates until the largest off-diagonal entry is below
    1e-12 of the largest diagonal one (probed against its compiled body inertias; the
    published 3.x rule, an absolute 1e-12 with an early exit on the rotation cosine,
    disagrees with it on small or near-isotropic inertias)."""
    mat = np.asarray(mat, dtype=np.float64).reshape(3, 3)
    quat = np.array([1.0, 0.0, 0.0, 0.0])
    eig = np.zeros(3)
    tol = 1e-12 * max(abs(mat[0, 0]), abs(mat[1, 1]), abs(mat[2, 2]))
    for _ in range(500):
        ev = quat2mat(quat)
        d = ev.T @ mat @ ev
        eig = np.array([d[0, 0], d[1, 1], d[2, 2]])
        if abs(d[0, 1]) > abs(d[0, 2]) and abs(d[0, 1]) > abs(d[1, 2]):
            rk, ck, rotk = 0, 1, 2
        elif abs(d[0, 2]) > abs(d[1, 2]):
            rk, ck, rotk = 0, 2, 1
        else:
            rk, ck, rotk = 1, 2, 0
        if abs(d[rk, ck]) <= tol:
            break
        tau = (d[ck, ck] - d[rk, rk]) / (2 * d[rk, ck])
        t = 1.0 / (tau + math.sqrt(1 + tau * tau)) if tau >= 0 else -1.0 / (-tau + math.sqrt(1 + tau * tau))
        c = 1.0 / math.sqrt(1 + t * t)
        r = np.zeros(4)
        s = math.sqrt(0.5 - 0.5 * c)
        r[rotk + 1] = -s if tau >= 0 else s
        if rotk == 1:
            r[rotk + 1] = -r[rotk + 1]
        r[0] = math.sqrt(1.0 - r[rotk + 1] ** 2)
        r = normvec(r)[0]
        quat = normvec(mulquat(quat, r))[0]
    for j in range(3):
        j1 = j % 2
        if eig[j1] + 1e-12 < eig[j1 + 1]:
            eig[j1], eig[j1 + 1] = eig[j1 + 1], eig[j1]
            r = np.zeros(4)
            r[0] = 0.707106781186548
            r[(j1 + 2) % 3 + 1] = r[0]
            quat = normvec(mulquat(quat, r))[0]
    return eig, quat


def fullinertia(full6) -> tuple[np.ndarray, np.ndarray]:
    """(principal inertia, quat) from (ixx, iyy, izz, ixy, ixz, iyz)."""
    f = full6
    mat = np.array([[f[0], f[3], f[4]], [f[3], f[1], f[5]], [f[4], f[5], f[2]]])
    eig, quat = eig3(mat)
    if eig[2] < EPS:
        raise ValueError("inertia must have positive eigenvalues")
    return eig, quat


def globalinertia(local3, quat) -> np.ndarray:
    """Full inertia (xx, yy, zz, xy, xz, yz) of a principal inertia rotated by quat."""
    m = quat2mat(quat)
    full = m @ np.diag(local3) @ m.T
    return np.array([full[0, 0], full[1, 1], full[2, 2], full[0, 1], full[0, 2], full[1, 2]])


def offcenter(mass: float, v) -> np.ndarray:
    x, y, z = v
    return mass * np.array([y * y + z * z, x * x + z * z, x * x + y * y, -x * y, -x * z, -y * z])
