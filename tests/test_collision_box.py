"""Box-box and capsule-box narrow phase (collision/box.py) against MuJoCo's mj_collision.

Every pose is a two-body model (each geom in a body with a free joint, contype/conaffinity
letting only that pair collide). The poses come in families: random ones, boxes resting
face on face (aligned, rotated about the normal, stacked in a rotated frame, touching
exactly), crossing edges, a corner on a face, deep penetration, the margin band and beyond,
degenerate thin boxes, identical coincident boxes, and capsules lying on a face, across an
edge, end-on, inside the box, and with a large radius. All poses of one function go through
a single jit-compiled vmap; the comparison is float64 at 1e-9 with equal contact counts.
Exact ties (touching at zero margin, coincident boxes) are included on purpose: box.py
keeps MuJoCo's rounding there.
"""

from __future__ import annotations

import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))

import collision_ref  # noqa: E402
from collision_ref import assert_same_contacts, geom_of, mujoco_contacts, pair_margin  # noqa: E402

from jaxsim.collision import box  # noqa: E402
from jaxsim.collision.common import Geom, make_frame  # noqa: E402

jax.config.update("jax_enable_x64", True)

TOL = 1e-9
_make_frame_jit = jax.jit(make_frame)


@pytest.fixture(autouse=True)
def _fast_frames(monkeypatch):
    """collision_ref completes frames eagerly; the jitted make_frame keeps this fast."""
    monkeypatch.setattr(collision_ref, "make_frame", _make_frame_jit)


# ----------------------------------------------------------------------------- poses

IDQ = np.array([1.0, 0.0, 0.0, 0.0])


def _quat(axis, deg):
    axis = np.asarray(axis, float)
    axis = axis / np.linalg.norm(axis)
    a = np.deg2rad(deg) / 2
    return np.concatenate([[np.cos(a)], np.sin(a) * axis])


def _qmul(a, b):
    w1, v1, w2, v2 = a[0], a[1:], b[0], b[1:]
    q = np.concatenate([[w1 * w2 - v1 @ v2], w1 * v2 + w2 * v1 + np.cross(v1, v2)])
    return q / np.linalg.norm(q)


def _qrot(q, v):
    w, u = q[0], q[1:]
    v = np.asarray(v, float)
    return v + 2 * np.cross(u, np.cross(u, v) + w * v)


def _rand_quat(rng):
    q = rng.normal(size=4)
    return q / np.linalg.norm(q)


def _jitter(rng, q, scale):
    return _qmul(q, _quat(rng.normal(size=3), scale * rng.normal()))


def _xml(t1, s1, t2, s2, m1=0.0, m2=0.0):
    body = '<body><inertial pos="0 0 0" mass="1" diaginertia="1 1 1"/><freejoint/>'
    return f"""<mujoco><option gravity="0 0 0"/><worldbody>
{body}<geom type="{t1}" size="{s1}" margin="{m1}" contype="1" conaffinity="2"/></body>
{body}<geom type="{t2}" size="{s2}" margin="{m2}" contype="2" conaffinity="1"/></body>
</worldbody></mujoco>"""


def _q(p1, q1, p2, q2):
    return np.concatenate([p1, q1, p2, q2])


def _box_cases():
    """{family: [(xml, qpos), ...]} for box : box."""
    rng = np.random.default_rng(20260)
    cases = {}

    # random poses, several size pairs and margins
    rows = []
    for s1, s2, m1, m2 in [("0.5 0.3 0.2", "0.4 0.25 0.35", 0.01, 0.02),
                           ("0.3 0.3 0.3", "0.3 0.3 0.3", 0.0, 0.0),
                           ("1 0.1 0.6", "0.2 0.7 0.05", 0.0, 0.05)]:
        x = _xml("box", s1, "box", s2, m1, m2)
        for _ in range(150):
            rows.append((x, _q(np.zeros(3), _rand_quat(rng), rng.normal(size=3) * 0.5,
                               _rand_quat(rng))))
    cases["random"] = rows

    # face on face: box 2 on top of box 1, turned about the normal, offset in the plane;
    # penetration 0 (exact touch), small, tiny, and a small gap
    rows = []
    for s1, s2 in [("0.5 0.5 0.5", "0.5 0.5 0.5"), ("0.5 0.3 0.2", "0.5 0.3 0.2"),
                   ("1 1 0.2", "0.4 0.3 0.3"), ("0.3 0.3 0.3", "0.6 0.5 0.1")]:
        x = _xml("box", s1, "box", s2)
        h = float(s1.split()[2]) + float(s2.split()[2])
        for ang in [0, 90, 180, 45, 30, 10, 1e-7, 89.9999999, 63.2]:
            for off in [(0, 0), (0.1, 0.05), (0.5, 0), (0.3, 0.3)]:
                for pen in [0.0, 0.01, 1e-12, -0.001]:
                    rows.append((x, _q(np.zeros(3), IDQ, [off[0], off[1], h - pen],
                                       _quat([0, 0, 1], ang))))
    cases["face_on_face"] = rows

    # the same in a random common frame (rotation entries no longer exact)
    rows = []
    x = _xml("box", "0.5 0.5 0.5", "box", "0.3 0.4 0.2", 0.005, 0.0)
    for _ in range(150):
        qf = _rand_quat(rng)
        ang = rng.choice([0.0, 90.0, 45.0, rng.uniform(0, 360)])
        off = rng.uniform(-0.6, 0.6, 2) * rng.choice([0, 1])
        pen = rng.choice([0.0, 0.01, -0.003, -0.01])
        p2 = _qrot(qf, [off[0], off[1], 0.7 - pen])
        rows.append((x, _q(np.zeros(3), qf, p2, _qmul(qf, _quat([0, 0, 1], ang)))))
    cases["face_on_face_rotated_frame"] = rows

    # slightly tilted box on a plate: edge axes compete with (and yield to) the face axis
    rows = []
    x = _xml("box", "0.5 0.5 0.2", "box", "0.3 0.3 0.3")
    for _ in range(200):
        q2 = _quat(rng.normal(size=3), rng.choice([0.05, 0.5, 3.0, 8.0]) * rng.normal())
        p2 = [rng.uniform(-0.8, 0.8), rng.uniform(-0.8, 0.8), 0.5 + rng.uniform(-0.05, 0.02)]
        rows.append((x, _q(np.zeros(3), IDQ, p2, q2)))
    cases["tilted"] = rows

    # crossing edges
    rows = []
    x = _xml("box", "0.5 0.4 0.3", "box", "0.4 0.3 0.5")
    q1 = _quat([1, 0, 0], 45)
    q2 = _qmul(_quat([0, 1, 0], 45), _quat([1, 0, 0], 90))
    for _ in range(200):
        p2 = [rng.uniform(-0.2, 0.2), rng.uniform(-0.2, 0.2), 1.0 + rng.uniform(-0.05, 0.05)]
        rows.append((x, _q(np.zeros(3), _jitter(rng, q1, 5), p2, _jitter(rng, q2, 5))))
    cases["edge_edge"] = rows

    # a corner on a face
    rows = []
    x = _xml("box", "1 1 0.2", "box", "0.3 0.3 0.3")
    down = np.concatenate([[1.0 + -1 / np.sqrt(3)], np.cross([1, 1, 1], [0, 0, -1]) / np.sqrt(3)])
    down /= np.linalg.norm(down)  # takes the (1, 1, 1) corner direction to -z
    for _ in range(150):
        q2 = _qmul(_quat([0, 0, 1], rng.uniform(0, 360)), _jitter(rng, down, 0.5))
        p2 = [rng.uniform(-0.5, 0.5), rng.uniform(-0.5, 0.5),
              0.2 + 0.3 * np.sqrt(3) - rng.uniform(-0.02, 0.05)]
        rows.append((x, _q(np.zeros(3), IDQ, p2, q2)))
    cases["vertex_face"] = rows

    # deep penetration, centres close together
    rows = []
    x = _xml("box", "0.5 0.3 0.2", "box", "0.4 0.25 0.35")
    for _ in range(150):
        rows.append((x, _q(rng.normal(size=3) * 0.02, _rand_quat(rng), np.zeros(3),
                           _rand_quat(rng))))
    cases["deep"] = rows

    # separated within the margin band and beyond it
    rows = []
    x = _xml("box", "0.5 0.3 0.2", "box", "0.4 0.25 0.35", 0.05, 0.03)
    for k in range(200):
        q2 = _rand_quat(rng) if k % 2 else _quat([0, 0, 1], rng.uniform(0, 360))
        p2 = [rng.uniform(-0.5, 0.5), rng.uniform(-0.5, 0.5), 0.8 + rng.uniform(-0.02, 0.2)]
        rows.append((x, _q(np.zeros(3), IDQ, p2, q2)))
    cases["margin"] = rows

    # degenerate thin boxes: plates, needles, a speck
    rows = []
    for s1, s2 in [("1e-7 0.5 0.5", "0.5 0.5 1e-7"), ("0.5 0.5 1e-9", "0.5 0.5 1e-9"),
                   ("1e-6 1e-6 0.5", "0.3 0.3 0.3"), ("0.5 0.5 0.5", "1e-8 1e-8 1e-8")]:
        x = _xml("box", s1, "box", s2, 0.001, 0.0)
        for k in range(80):
            q2 = _rand_quat(rng) if k % 3 else _quat([0, 0, 1], rng.choice([0, 90, 45, 13]))
            rows.append((x, _q(np.zeros(3), IDQ, rng.normal(size=3) * 0.3, q2)))
    cases["thin"] = rows

    # identical boxes at the same pose
    rows = []
    for s in ["0.5 0.5 0.5", "0.5 0.3 0.2", "0.5 0.5 0.2"]:
        x = _xml("box", s, "box", s)
        rows.append((x, _q(np.zeros(3), IDQ, np.zeros(3), IDQ)))
        for _ in range(40):
            p, q = rng.normal(size=3), _rand_quat(rng)
            rows.append((x, _q(p, q, p, q)))
    cases["coincident"] = rows
    return cases


def _capsule_cases():
    """{family: [(xml, qpos), ...]} for capsule : box (the capsule is geom 1)."""
    rng = np.random.default_rng(4711)
    cases = {}
    x = _xml("capsule", "0.1 0.4", "box", "0.5 0.3 0.2", 0.01, 0.02)
    lying = _quat([0, 1, 0], 90)  # capsule axis along x

    rows = []
    for x_ in [x, _xml("capsule", "0.05 0.8", "box", "0.2 0.4 0.3"),
               _xml("capsule", "0.3 0.1", "box", "0.5 0.5 0.5", 0.0, 0.05)]:
        for _ in range(150):
            rows.append((x_, _q(rng.normal(size=3) * 0.5, _rand_quat(rng), np.zeros(3),
                                _rand_quat(rng))))
    cases["random"] = rows

    # lying on the top face, along the box axes, diagonal and at random yaw; touching
    # exactly, penetrating, within and beyond the margin
    rows = []
    for _ in range(250):
        yaw = rng.choice([0.0, 90.0, 45.0, rng.uniform(0, 360)])
        q1 = _qmul(_quat([0, 0, 1], yaw), _jitter(rng, lying, rng.choice([0, 0, 3])))
        p1 = [rng.uniform(-0.8, 0.8), rng.uniform(-0.6, 0.6),
              0.3 - rng.choice([0.0, 0.01, -0.005, -0.02, -0.05])]
        rows.append((x, _q(p1, q1, np.zeros(3), IDQ)))
    cases["capsule_lying"] = rows

    # across a top edge of the box
    rows = []
    for k in range(250):
        q1 = _qmul(_quat([0, 0, 1], rng.uniform(0, 360)), _jitter(rng, lying, 20))
        d = (0.1 - rng.choice([0.0, 0.01, -0.005, -0.02])) / np.sqrt(2)
        p1 = ([0.5 + d, rng.uniform(-0.4, 0.4), 0.2 + d] if k % 2 else
              [rng.uniform(-0.6, 0.6), 0.3 + d, 0.2 + d])
        rows.append((x, _q(p1, q1, np.zeros(3), IDQ)))
    cases["capsule_edge"] = rows

    # end-on: axis (nearly) along the face normal, pointing up or down
    rows = []
    for _ in range(250):
        q1 = _jitter(rng, IDQ, rng.choice([0, 1e-3, 3, 15]))
        if rng.random() < 0.5:
            q1 = _qmul(_quat([1, 0, 0], 180), q1)
        p1 = [rng.uniform(-0.7, 0.7), rng.uniform(-0.5, 0.5), 0.7 - rng.uniform(-0.02, 0.05)]
        rows.append((x, _q(p1, q1, np.zeros(3), IDQ)))
    cases["capsule_end_on"] = rows

    # centre inside the box, including the box centre itself
    rows = []
    for k in range(150):
        p1 = rng.normal(size=3) * rng.choice([0, 0.05, 0.2])
        rows.append((x, _q(p1, _rand_quat(rng) if k % 2 else IDQ, np.zeros(3), IDQ)))
    cases["capsule_inside"] = rows

    # a radius much larger than the box (the search bound that MuJoCo squares)
    rows = []
    xb = _xml("capsule", "10 0.3", "box", "0.5 0.3 0.2", 0.0, 0.1)
    for _ in range(150):
        rows.append((xb, _q(rng.normal(size=3) * 8, _rand_quat(rng), np.zeros(3),
                            _rand_quat(rng))))
    rows.append((xb, _q([5.5, 0, 0], IDQ, np.zeros(3), IDQ)))
    cases["capsule_large_radius"] = rows
    return cases


# ----------------------------------------------------------------------------- runs


def _stack(gs):
    return Geom(*(np.stack(a) for a in zip(*(g[:3] for g in gs), strict=True)))


def _with_grad(fn):
    """Contacts and d(sum of valid dist and pos) / d(pos1, pos2, mat1, mat2), in one pass."""

    def run(g1, g2, margin):
        def loss(p1, p2, mat1, mat2):
            c = fn(Geom(p1, mat1, g1.size), Geom(p2, mat2, g2.size), margin)
            total = (jnp.sum(jnp.where(c.valid, c.dist, 0.0))
                     + jnp.sum(jnp.where(c.valid[:, None], c.pos, 0.0)))
            return total, c

        grads, c = jax.grad(loss, argnums=(0, 1, 2, 3), has_aux=True)(g1.pos, g2.pos, g1.mat,
                                                                        g2.mat)
        return c, grads

    return jax.jit(jax.vmap(run))


def _run(fn, cases):
    """MuJoCo's contacts, ours and our gradients for every pose:
    {family: [(ours_k, ref_k, grads_k), ...]}."""
    refs, g1s, g2s, margins, names = [], [], [], [], []
    for name, rows in cases.items():
        for xml, qpos in rows:
            m, d, cons = mujoco_contacts(xml, qpos)
            refs.append(cons)
            g1s.append(geom_of(m, d, 0))
            g2s.append(geom_of(m, d, 1))
            margins.append(pair_margin(m, 0, 1))
            names.append(name)
    out = _with_grad(fn)(_stack(g1s), _stack(g2s), np.array(margins))
    out = jax.tree.map(np.asarray, out)
    res = {name: [] for name in cases}
    for k, name in enumerate(names):
        ours, grads = jax.tree.map(lambda a, k=k: a[k], out)
        res[name].append((ours, refs[k], grads))
    return res


@pytest.fixture(scope="module")
def box_results():
    return _run(box.box_box, _box_cases())


@pytest.fixture(scope="module")
def capsule_results():
    return _run(box.capsule_box, _capsule_cases())


def _check(results):
    for k, (ours, ref, _) in enumerate(results):
        for a in jax.tree.leaves(ours):
            assert np.isfinite(a).all(), f"pose {k}: non-finite output"
        try:
            assert_same_contacts(ours, ref, tol=TOL, frame_tol=TOL)
        except AssertionError as e:
            raise AssertionError(f"pose {k}: {e}") from None
    return [len(ref) for _, ref, _ in results]


BOX_FAMILIES = ["random", "face_on_face", "face_on_face_rotated_frame", "tilted", "edge_edge",
                "vertex_face", "deep", "margin", "thin", "coincident"]
CAPSULE_FAMILIES = ["random", "capsule_lying", "capsule_edge", "capsule_end_on",
                    "capsule_inside", "capsule_large_radius"]


@pytest.mark.parametrize("family", BOX_FAMILIES)
def test_box_box(box_results, family):
    counts = _check(box_results[family])
    assert max(counts) <= 8
    if family == "face_on_face":
        assert {4, 5, 6, 8} <= set(counts) and 0 in counts
    if family in ("edge_edge", "vertex_face"):
        assert set(counts) == {0, 1}
    if family == "deep":
        assert min(counts) >= 1 and max(counts) >= 6
    if family == "coincident":
        assert min(counts) >= 4
    if family == "margin":
        dists = [c["dist"] for _, ref, _ in box_results[family] for c in ref]
        assert 0 in counts and max(dists) > 0


@pytest.mark.parametrize("family", CAPSULE_FAMILIES)
def test_capsule_box(capsule_results, family):
    counts = _check(capsule_results[family])
    assert max(counts) <= 2
    if family in ("capsule_lying", "capsule_edge", "capsule_end_on"):
        assert {0, 1, 2} <= set(counts)
    if family == "capsule_large_radius":
        # penetrating by 5 with the segment 5 away: found only with the squared bound
        ref = capsule_results[family][-1][1]
        assert len(ref) == 1 and abs(ref[0]["dist"] + 5) < 1e-12


def test_slot_counts():
    """MuJoCo's mj_maxContact: 8 slots for box-box, 4 for capsule-box (which fills 2 at most)."""
    assert box.FUNCTIONS == {(3, 6): (box.capsule_box, 4), (6, 6): (box.box_box, 8)}


# ----------------------------------------------------------------------------- gradients


def _check_grads(results):
    for family, rows in results.items():
        for k, (_, _, grads) in enumerate(rows):
            for g in grads:
                assert np.isfinite(g).all(), f"{family} pose {k}: {grads}"


def test_box_box_gradient_finite(box_results):
    """Gradients w.r.t. positions and orientations are finite at every pose, among them
    coincident boxes, boxes touching exactly (face_on_face at zero penetration), parallel
    edges, and boxes separated within and beyond the margin (no valid contact)."""
    assert any(not o.valid.any() for o, _, _ in box_results["margin"])
    _check_grads(box_results)


def test_capsule_box_gradient_finite(capsule_results):
    """The same for capsule : box (centre on the box centre, touching, parallel edges)."""
    _check_grads(capsule_results)
