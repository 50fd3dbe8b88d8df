"""Analytic narrow phase (collision/primitive.py) against MuJoCo's mj_collision.

Each pair type gets a few models (random and degenerate sizes, with and without margins,
tilted planes) and many poses per model: random ones spread from deep penetration to
beyond the margin, plus hand-made ones (touching, coincident centres, parallel and
perpendicular axes, shapes lying flat or standing on the plane, box face/edge/vertex down).
All poses of a pair type go through one jit-compiled vmap of our function.

Exact ties are avoided (touching at zero margin, a sphere centre exactly on an edge or a
rim): there one rounding decides the branch, and XLA fuses multiply-adds where MuJoCo's
build does not, so such poses step 1e-9 to 1e-4 off the tie instead.
"""

from __future__ import annotations

import os
import sys

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))

import collision_ref  # noqa: E402
from collision_ref import (  # noqa: E402
    assert_same_contacts,
    geom_of,
    mujoco_contacts,
    ours_list,
    pair_margin,
)

from jaxsim.collision import primitive  # noqa: E402
from jaxsim.collision.common import Geom, make_frame  # noqa: E402

jax.config.update("jax_enable_x64", True)

TOL = 1e-9
NAMES = {0: "plane", 2: "sphere", 3: "capsule", 5: "cylinder", 6: "box"}
NSIZE = {2: 1, 3: 2, 5: 2, 6: 3}

_make_frame_jit = jax.jit(make_frame)


@pytest.fixture(autouse=True)
def _fast_frames(monkeypatch):
    """collision_ref completes each frame eagerly (milliseconds per contact); the same
    function compiled once keeps thousands of comparisons fast."""
    monkeypatch.setattr(collision_ref, "make_frame", _make_frame_jit)


# ----------------------------------------------------------------------------- poses


def _quat(axis, angle):
    axis = np.asarray(axis, float)
    axis = axis / np.linalg.norm(axis)
    return np.concatenate([[np.cos(angle / 2)], np.sin(angle / 2) * axis])


def _quat_from_to(a, b):
    """Unit quaternion rotating unit vector a onto unit vector b (a != -b)."""
    a = np.asarray(a, float) / np.linalg.norm(a)
    b = np.asarray(b, float) / np.linalg.norm(b)
    q = np.concatenate([[1.0 + a @ b], np.cross(a, b)])
    return q / np.linalg.norm(q)


def _mat(q):
    m = np.zeros(9)
    mujoco.mju_quat2Mat(m, np.asarray(q, float))
    return m.reshape(3, 3)


def _rand_quat(rng):
    q = rng.normal(size=4)
    return q / np.linalg.norm(q)


def _extent(typ, size, mat, n):
    """Half-extent of a geom along unit direction n (its support distance)."""
    c = mat.T @ n
    if typ == 2:
        return size[0]
    if typ == 3:
        return size[0] + size[1] * abs(c[2])
    if typ == 5:
        return size[1] * abs(c[2]) + size[0] * np.sqrt(max(0.0, 1 - c[2] ** 2))
    return float(np.abs(size[:3] * c).sum())


# ---------------------------------------------------------------------------- models


def _xml(t1, s1, t2, s2, margins=(0.0, 0.0), gaps=(0.0, 0.0), plane_quat=(1, 0, 0, 0),
         plane_pos=(0, 0, 0)):
    def attrs(i, size):
        return (f"size='{' '.join(repr(float(x)) for x in size)}' margin='{margins[i]!r}' "
                f"gap='{gaps[i]!r}' contype='1' conaffinity='1'")

    body = "<body><freejoint/><inertial pos='0 0 0' mass='1' diaginertia='1 1 1'/>"
    g2 = f"{body}<geom type='{NAMES[t2]}' {attrs(1, s2)}/></body>"
    if t1 == 0:
        q = " ".join(repr(float(x)) for x in plane_quat)
        p = " ".join(repr(float(x)) for x in plane_pos)
        g1 = (f"<geom type='plane' pos='{p}' quat='{q}' "
              f"{attrs(0, (3.0, 3.0, 0.1))}/>")
    else:
        g1 = f"{body}<geom type='{NAMES[t1]}' {attrs(0, s1)}/></body>"
    return (f"<mujoco><option gravity='0 0 0'/><worldbody>{g1}{g2}</worldbody></mujoco>")


def _contacts(m, d, qpos):
    """MuJoCo's contacts at one pose of a model built once (as mujoco_contacts reports)."""
    d.qpos[:] = qpos
    mujoco.mj_forward(m, d)
    out = []
    for i in range(d.ncon):
        c = d.contact[i]
        assert (int(c.geom[0]), int(c.geom[1])) == (0, 1)
        out.append(dict(dist=float(c.dist), pos=np.array(c.pos),
                        frame=np.array(c.frame).reshape(3, 3)))
    return out


def _stack(geoms):
    """One batched Geom from a list of primitive geoms."""
    return Geom(*(np.stack([getattr(g, f) for g in geoms]) for f in ("pos", "mat", "size")))


class Cases:
    """Poses of one pair type: our inputs (stacked) and MuJoCo's contacts."""

    def __init__(self, t1, t2):
        self.t1, self.t2 = t1, t2
        self.g1, self.g2, self.margin, self.ref, self.label = [], [], [], [], []

    def model(self, s1, s2, **kw):
        xml = _xml(self.t1, s1, self.t2, s2, **kw)
        m, d, _ = mujoco_contacts(xml)
        return m, d

    def add(self, m, d, qpos, label):
        ref = _contacts(m, d, qpos)
        self.g1.append(geom_of(m, d, 0))
        self.g2.append(geom_of(m, d, 1))
        self.margin.append(pair_margin(m, 0, 1))
        self.ref.append(ref)
        self.label.append(label)

    def run(self):
        fn, k = primitive.FUNCTIONS[(self.t1, self.t2)]

        out = jax.jit(jax.vmap(fn))(_stack(self.g1), _stack(self.g2), np.array(self.margin))
        out = jax.tree.map(np.asarray, out)
        assert out.dist.shape == (len(self.ref), k)
        assert np.all(np.isfinite(out.dist)) and np.all(np.isfinite(out.pos))
        assert np.all(np.isfinite(out.normal)) and np.all(np.isfinite(out.tangent))
        ncon = 0
        for i, ref in enumerate(self.ref):
            mine = jax.tree.map(lambda x, i=i: x[i], out)
            try:
                assert_same_contacts(mine, ref, tol=TOL, frame_tol=TOL)
                _check_frames(mine, ref)
            except AssertionError as e:
                raise AssertionError(f"case {i} ({self.label[i]}): {e}") from None
            ncon += len(ref)
        return ncon


def _check_frames(mine, ref):
    """The whole contact frame (as the driver completes it) matches MuJoCo's."""
    ours = ours_list(mine)
    for r in ref:
        k = int(np.argmin([max(abs(o["dist"] - r["dist"]), np.abs(o["pos"] - r["pos"]).max())
                           for o in ours]))
        err = np.abs(ours[k]["frame"] - r["frame"]).max()
        assert err <= TOL, f"frame mismatch {err:.3g}: ours {ours[k]['frame']}, {r['frame']}"


def _free(pos, quat):
    return np.concatenate([pos, quat])


# ---------------------------------------------------------------------- plane pairs

PLANE_TILTS = [((1, 0, 0, 0), (0, 0, 0)), (tuple(_quat([1, 2, 0.5], 0.7)), (0.3, -0.2, 0.1))]


def _plane_sizes(typ, rng):
    sizes = [rng.uniform(0.05, 0.5, NSIZE[typ]) for _ in range(2)]
    if typ == 3:
        sizes.append(np.array([0.2, 1e-9]))  # nearly a sphere
    if typ == 5:
        sizes += [np.array([0.5, 0.01]), np.array([0.01, 0.6])]  # disk, needle
    if typ == 6:
        sizes += [np.array([0.3, 0.2, 1e-6]), np.array([1e-3, 1.3e-3, 7e-4])]  # plate, speck
    return sizes


def _special_plane_quats(typ):
    up = (1.0, 0.0, 0.0, 0.0)
    flat = tuple(_quat([1, 0, 0], np.pi / 2))
    quats = {"standing": up, "lying": flat, "upside down": tuple(_quat([1, 0, 0], np.pi))}
    if typ == 5:
        quats["slightly tilted"] = tuple(_quat([0, 1, 0], 1e-6))
        quats["tilted"] = tuple(_quat([1, 1, 0], 0.4))
    if typ == 6:
        quats = {"face": up, "edge": tuple(_quat([1, 0, 0], np.pi / 4)),
                 "vertex": tuple(_quat_from_to([1, 1, 1], [0, 0, -1]))}
    return quats


def _touching(margin):
    """Offsets of "touching" poses. Without a margin, exact contact is a tie that one
    rounding decides (XLA fuses multiply-adds, MuJoCo does not), so step just off it."""
    return (0.0,) if margin > 0 else (-1e-9, 1e-9)


def _mul_quat(a, b):
    out = np.zeros(4)
    mujoco.mju_mulQuat(out, np.asarray(a, float), np.asarray(b, float))
    return out


def _plane_poses(cases, m, d, typ, size, margin, pq, pp, rng):
    pmat = _mat(pq)
    n, origin = pmat[:, 2], np.array(pp, float)

    def place(q, offset, spread=0.3):
        ext = _extent(typ, size, _mat(q), n)
        p = (origin + n * (ext + offset) + rng.uniform(-spread, spread) * pmat[:, 0]
             + rng.uniform(-spread, spread) * pmat[:, 1])
        return _free(p, q)

    scale = max(size) + 0.02
    for _ in range(30):
        cases.add(m, d, place(_rand_quat(rng), rng.uniform(-scale, 2 * margin + 0.03)),
                  "random")
    for name, q in _special_plane_quats(typ).items():
        q = _mul_quat(pq, q)  # relative to the plane
        inside = (0.5 * margin,) if margin > 0 else ()
        for off in (-0.3 * scale, -1e-3, *_touching(margin), *inside, margin + 0.02):
            cases.add(m, d, place(q, off), f"{name} off={off}")
    cases.add(m, d, _free(origin, _rand_quat(rng)), "centre on plane")


@pytest.mark.parametrize("typ", [2, 3, 5, 6], ids=lambda t: f"plane-{NAMES[t]}")
def test_plane(typ):
    rng = np.random.default_rng(100 + typ)
    cases = Cases(0, typ)
    for size in _plane_sizes(typ, rng):
        for margin in (0.0, 0.04):
            for pq, pp in PLANE_TILTS:
                m, d = cases.model(None, size, margins=(margin / 2, margin / 2),
                                   gaps=(0.0, 0.01 if margin else 0.0), plane_quat=pq,
                                   plane_pos=pp)
                _plane_poses(cases, m, d, typ, size, margin, pq, pp, rng)
    ncon = cases.run()
    assert ncon > 100


def test_plane_capsule_standing_frame():
    """A capsule standing upright on a plane: the tangent (its axis) is parallel to the
    normal, and MuJoCo's frame falls back to (z, x, y)."""
    m, d, ref = mujoco_contacts(_xml(0, None, 3, (0.1, 0.3)), np.array([0, 0, 0.35, 1, 0, 0, 0]))
    assert len(ref) == 1
    np.testing.assert_allclose(ref[0]["frame"], np.eye(3)[[2, 0, 1]], atol=1e-12)
    mine = primitive.plane_capsule(geom_of(m, d, 0), geom_of(m, d, 1), pair_margin(m, 0, 1))
    assert_same_contacts(mine, ref, tol=TOL, frame_tol=TOL)
    _check_frames(mine, ref)


# ---------------------------------------------------------------------- geom pairs

PAIRS = [(2, 2), (2, 3), (2, 5), (2, 6), (3, 3)]


def _pair_sizes(t1, t2, rng):
    out = [(rng.uniform(0.05, 0.5, NSIZE[t1]), rng.uniform(0.05, 0.5, NSIZE[t2]))
           for _ in range(3)]
    tiny = {2: [1e-4], 3: [0.1, 1e-9], 5: [0.3, 1e-4], 6: [0.3, 0.2, 1e-6]}
    out.append((rng.uniform(0.05, 0.5, NSIZE[t1]), np.array(tiny[t2])))
    if t2 == 5:
        out.append((np.array([0.1]), np.array([1e-4, 0.4])))  # needle cylinder
    if t1 == t2 == 3:
        out.append((np.array([0.1, 1e-9]), np.array([0.15, 0.3])))
    return out


def _special_pair_poses(t1, t2, s1, s2, margin, rng):
    """(qpos, label) of hand-made configurations for two free bodies."""
    up = np.array([1.0, 0, 0, 0])
    perp = _quat([1, 0, 0], np.pi / 2)
    flip = _quat([1, 0, 0], np.pi)
    p1 = rng.uniform(-0.2, 0.2, 3)
    r1 = s1[0]
    out = [(_free(p1, up), _free(p1, up), "coincident centres, parallel axes")]
    if not (t1 == t2 == 3 and min(s1[1], s2[1]) < 1e-6):
        # (a capsule of length ~0 touches the other's axis ~1e-9 off its centre: the
        # normal would come from rounding noise, in MuJoCo as here)
        out.append((_free(p1, up), _free(p1, _rand_quat(rng)), "coincident centres"))
    for q2, axes in ((up, "parallel"), (flip, "antiparallel"), (perp, "perpendicular")):
        for direction in ([1, 0, 0], [0, 0, 1], [1, 0.5, 0.3]):
            dvec = np.array(direction) / np.linalg.norm(direction)
            ext1 = _extent(t1, s1, np.eye(3), dvec)
            ext2 = _extent(t2, s2, _mat(q2), -dvec)
            for off in (-0.5 * min(ext1, ext2), -1e-3, *_touching(margin), 0.03, 0.3):
                p2 = p1 + dvec * (ext1 + ext2 + off)
                out.append((_free(p1, up), _free(p2, q2), f"{axes} axes dir={direction} "
                            f"off={off}"))
    if t2 in (5, 6):  # sphere centre inside, on the axis, on faces and edges
        q2 = _rand_quat(rng)
        mat = _mat(q2)
        sz = np.array(s2)
        # on an edge, rim or vertex the branch is a tie: step inside and outside of it
        near = [f * np.array(v) for v in ([1.0, 0, 1.0], [1.0, 1.0, 1.0])
                for f in (1 - 1e-4, 1 + 1e-4)]
        local = [np.zeros(3), np.array([0.1, 0.05, 0.5]), np.array([0.3, 0.2, 0.1]),
                 np.array([0, 0, 1.0]), np.array([1.0, 0, 0]), np.array([0.2, 0.1, 1.3]),
                 np.array([1.2, 0, 0.3]), *near]
        for v in local:
            ext = sz[[0, 0, 1]] if t2 == 5 else sz
            if t2 == 5 and v[1] != 0:
                v = v * np.array([1 / np.sqrt(2), 1 / np.sqrt(2), 1.0])
            p2 = p1 - mat @ (v * ext)
            out.append((_free(p1, _rand_quat(rng)), _free(p2, q2), f"local point {v}"))
        if t2 == 5:  # sphere on the axis beyond a cap, and just outside a rim
            for sgn in (1, -1):
                p2 = p1 - mat @ np.array([0, 0, sgn * (sz[1] + r1 * 0.5)])
                out.append((_free(p1, up), _free(p2, q2), f"on axis beyond cap {sgn}"))
            p2 = p1 - mat @ np.array([sz[0] + 0.2 * r1, 0, sz[1] + 0.2 * r1])
            out.append((_free(p1, up), _free(p2, q2), "near rim"))
    return out


@pytest.mark.parametrize("pair", PAIRS, ids=lambda p: f"{NAMES[p[0]]}-{NAMES[p[1]]}")
def test_pair(pair):
    t1, t2 = pair
    rng = np.random.default_rng(10 * t1 + t2)
    cases = Cases(t1, t2)
    for s1, s2 in _pair_sizes(t1, t2, rng):
        for margins, gaps in (((0.0, 0.0), (0.0, 0.0)), ((0.03, 0.01), (0.005, 0.0))):
            m, d = cases.model(s1, s2, margins=margins, gaps=gaps)
            reach = max(s1) + max(s2)
            for _ in range(40):
                p1 = rng.uniform(-0.3, 0.3, 3)
                dvec = rng.normal(size=3)
                dvec /= np.linalg.norm(dvec)
                q1, q2 = _rand_quat(rng), _rand_quat(rng)
                p2 = p1 + dvec * rng.uniform(0.0, 1.3 * reach + 0.05)
                cases.add(m, d, np.concatenate([_free(p1, q1), _free(p2, q2)]), "random")
            for a, b, label in _special_pair_poses(t1, t2, s1, s2, sum(margins), rng):
                cases.add(m, d, np.concatenate([a, b]), label)
    if pair == (3, 3):
        _parallel_capsules(cases, rng)
    ncon = cases.run()
    assert ncon > 100


def _parallel_capsules(cases, rng):
    """Parallel and nearly parallel capsules (either side of MuJoCo's 1e-4 rad switch),
    side by side, overlapping lengthwise in every way, collinear and coincident."""
    tilts = [("parallel", np.array([1.0, 0, 0, 0])), ("antiparallel", _quat([1, 0, 0], np.pi))]
    for angle in (1e-7, 1e-5, 9e-5, 1.1e-4, 1e-3):
        axis = rng.normal(size=3)
        tilts.append((f"tilt {angle}", _quat(axis, angle)))
        tilts.append((f"anti tilt {angle}", _mul_quat(_quat([1, 0, 0], np.pi),
                                                      _quat(axis, angle))))
    for s1, s2 in (((0.1, 0.4), (0.15, 0.25)), ((0.2, 0.3), (0.05, 0.3))):
        m, d = cases.model(np.array(s1), np.array(s2), margins=(0.02, 0.0))
        for q in (np.array([1.0, 0, 0, 0]), _rand_quat(rng)):
            mat = _mat(q)
            z, x = mat[:, 2], mat[:, 0]
            for name, dq in tilts:
                q2 = _mul_quat(q, dq)
                # exactly on the line of the other axis, a tilt decides the normal alone
                laterals = (0.1, s1[0] + s2[0] + 0.01, 0.5)
                laterals = laterals + (0.0,) if "tilt" not in name else laterals
                for shift in (-1.0, -0.6, -0.3, 0.0, 0.1, 0.5, 0.8, 1.2):
                    for lateral in laterals:
                        p1 = rng.uniform(-0.2, 0.2, 3)
                        p2 = p1 + z * shift + x * lateral
                        cases.add(m, d, np.concatenate([_free(p1, q), _free(p2, q2)]),
                                  f"{name} shift={shift} lateral={lateral}")


# --------------------------------------------------------------------------- gradients


def _geom(pos, quat, size):
    return Geom(jnp.asarray(pos, float), jnp.asarray(_mat(quat)),
                jnp.asarray(np.pad(np.asarray(size, float), (0, 3 - len(size)))))


def _grad_cases(t1, t2):
    """Singular and ordinary poses: coincident centres, centre on the plane, touching,
    within and beyond the margin, parallel axes, edges, rims and a vanishing segment."""
    up = np.array([1.0, 0, 0, 0])
    tilt = _quat([1, 1, 0], 0.3)
    s = {0: [3, 3, 0.1], 2: [0.2], 3: [0.2, 0.3], 5: [0.2, 0.3], 6: [0.2, 0.3, 0.1]}
    s1, s2 = s[t1], s[t2]
    out = []
    if t1 == 0:
        quats = [up, tilt, _quat([1, 0, 0], np.pi / 2), _quat([0, 1, 0], 1e-9)]
        for q in quats:
            ext = _extent(t2, np.array(s2 + [0] * 3), _mat(q), np.array([0, 0, 1.0]))
            for h in (0.0, ext, ext + 0.01, 2 * ext, 0.5 * ext):
                out.append((_geom([0, 0, 0], up, s1), _geom([0.1, 0, h], q, s2)))
        return out
    c = np.array([0.1, 0.2, 0.3])
    quats = [up, tilt, _quat([1, 0, 0], np.pi / 2), _quat([1, 0, 0], 1e-5)]
    for q2 in quats:
        out.append((_geom(c, up, s1), _geom(c, q2, s2)))
        for dvec in ([1.0, 0, 0], [0, 0, 1.0]):
            for dist in (0.1, 0.4, 0.5, 0.52, 0.7):
                out.append((_geom(c, up, s1), _geom(c + np.array(dvec) * dist, q2, s2)))
    if t2 in (5, 6):  # sphere centre on a rim, an edge, a vertex
        for v in ([0.2, 0, 0.3], [0.2, 0.3, 0.1], [0.2, 0, 0]):
            out.append((_geom(c + np.array(v), up, s1), _geom(c, up, s2)))
    if t2 == 3:  # vanishing segments
        for short in ([0.2, 1e-9], [0.1, 1e-20]):
            out.append((_geom(c, up, s1), _geom(c, tilt, short)))
            out.append((_geom(c, up, s1), _geom(c + 0.1, up, short)))
            if t1 == 3:
                out.append((_geom(c, up, short), _geom(c + 0.1, tilt, short)))
    return out


@pytest.mark.parametrize("pair", sorted(primitive.FUNCTIONS),
                         ids=lambda p: f"{NAMES[p[0]]}-{NAMES[p[1]]}")
def test_gradient_finite(pair):
    """d(sum of valid distances)/d(positions, frames, sizes) is finite at singular poses."""
    fn, _ = primitive.FUNCTIONS[pair]

    def total(g1, g2):
        c = fn(g1, g2, 0.02)
        return jnp.sum(jnp.where(c.valid, c.dist, 0.0))

    # a light XLA pipeline: compiling the full one costs more than the whole check
    grad = jax.jit(jax.vmap(jax.grad(total, argnums=(0, 1))),
                   compiler_options={"xla_backend_optimization_level": 0,
                                     "xla_llvm_disable_expensive_passes": True})
    cases = _grad_cases(*pair)
    d1, d2 = grad(_stack([c[0] for c in cases]), _stack([c[1] for c in cases]))
    for name, g in (("g1", d1), ("g2", d2)):
        for field in ("pos", "mat", "size"):
            v = np.asarray(getattr(g, field))
            assert np.all(np.isfinite(v)), f"{name}.{field} gradient not finite"
    # and the distances do depend on the positions
    assert np.abs(np.asarray(d2.pos)).max() > 0
