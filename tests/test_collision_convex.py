"""Convex collisions (jaxsim.collision.convex) against MuJoCo 4.0's mj_collision.

All mjc_Convex pairs run through one compiled function (geom types traced), over seeded
random poses from separated to deep penetration, with and without margin; the plane pairs
and the gradient use their own small functions.

Tolerances: distances 1e-6. Positions and normals of smooth shapes 1e-3 / 5e-3: XLA fuses
a*b+c into FMA instructions where MuJoCo's C does not, and GJK and EPA on smooth shapes often
stop at the iteration limit, where such rounding differences still move the witness points
(with XLA_FLAGS=--xla_cpu_max_isa=AVX, i.e. without FMA, they agree to ~1e-13).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest

import jaxsim
from jaxsim.collision import ccd
from jaxsim.collision import convex as cv
from tests.collision_ref import assert_same_contacts, geom_of, ours_list, pair_margin

T = dict(plane=0, sphere=2, capsule=3, ellipsoid=4, cylinder=5, box=6, mesh=7)
MESHES = {
    "tet": 'vertex="0 0 0  1 0 0  0 1 0  0 0 1" scale=".4 .4 .4"',
    "cube": 'vertex="-1 -1 -1 1 -1 -1 1 1 -1 -1 1 -1 -1 -1 1 1 -1 1 1 1 1 -1 1 1" scale=".2 .25 .3"',
    "oct": 'vertex="1 0 0 -1 0 0 0 1 0 0 -1 0 0 0 1 0 0 -1" scale=".3 .3 .3"',
    # icosahedron plus an interior point (not on the hull)
    "ico": 'vertex="0 1 1.618 0 -1 1.618 0 1 -1.618 0 -1 -1.618 1 1.618 0 -1 1.618 0 1 -1.618 '
           '0 -1 -1.618 0 1.618 0 1 -1.618 0 1 1.618 0 -1 -1.618 0 -1 0.1 0.2 0.3" '
           'scale=".15 .15 .15"',
}
ASSETS = "".join(f'<mesh name="{k}" {v}/>' for k, v in MESHES.items())

# every pair MuJoCo sends to mjc_Convex
PAIRS = [
    (("sphere", ".3"), ("ellipsoid", ".2 .4 .3")),
    (("sphere", ".2"), ("mesh", "ico")),
    (("capsule", ".1 .3"), ("ellipsoid", ".05 .4 .1")),
    (("capsule", ".1 .3"), ("cylinder", ".2 .3")),
    (("capsule", ".1 .3"), ("mesh", "oct")),
    (("ellipsoid", ".3 .1 .2"), ("ellipsoid", ".02 .4 .3")),
    (("ellipsoid", ".3 .1 .2"), ("cylinder", ".2 .3")),
    (("ellipsoid", ".3 .1 .2"), ("box", ".2 .25 .3")),
    (("ellipsoid", ".3 .1 .2"), ("mesh", "tet")),
    (("cylinder", ".2 .3"), ("cylinder", ".15 .25")),
    (("cylinder", ".2 .3"), ("box", ".2 .25 .3")),
    (("cylinder", ".2 .3"), ("mesh", "cube")),
    (("box", ".2 .25 .3"), ("mesh", "cube")),
    (("mesh", "oct"), ("mesh", "ico")),
]
# MuJoCo 4.0 clips capsule segments against faces; the traced-type function used here does
# not (the driver's static capsule-mesh groups do, see test_capsule_lying_on_a_mesh_face):
# such poses (MuJoCo returns several contacts) are counted, not compared.
# (Cylinder caps and sides are clipped as MuJoCo does, see test_cylinder_face_contacts.)
CLIPPED_4_0 = {("capsule", "cylinder"), ("capsule", "mesh")}
# cylinder against a flat face: cap down (tilted about x; 0.1 rad is past mjFACE_TOL) or
# lying on its side (tilted about the axis, then about x; past mjEDGE_TOL at 0.1)
CYL_ON = [(("cylinder", ".2 .3"), ("box", ".2 .25 .3")),
          (("cylinder", ".2 .3"), ("cylinder", ".15 .25")),
          (("cylinder", ".2 .3"), ("mesh", "cube"))]


def _geom_xml(g, extra=""):
    if g[0] == "mesh":
        return f'<geom type="mesh" mesh="{g[1]}" {extra}/>'
    return f'<geom type="{g[0]}" size="{g[1]}" {extra}/>'


def _xml(a, b, margin=0.0, body2=""):
    return (f'<mujoco><asset>{ASSETS}</asset><worldbody>'
            f'<body><freejoint/>{_geom_xml(a, f"margin={chr(34)}{margin}{chr(34)}")}</body>'
            f'<body pos="0 0 1" {body2}><freejoint/>{_geom_xml(b)}</body>'
            f'</worldbody></mujoco>')


@pytest.fixture(scope="module")
def mesh_rows():
    return build_mesh_rows()


def build_mesh_rows():
    """MeshData of every test mesh (from jaxsim's compiled model), by name."""
    xml = (f'<mujoco><asset>{ASSETS}</asset><worldbody>'
           + "".join(f'<geom type="mesh" mesh="{k}"/>' for k in MESHES)
           + '</worldbody></mujoco>')
    model = jaxsim.load_string(xml, dtype=jnp.float64)
    data = ccd.mesh_data(model, range(len(MESHES)))
    rows = {k: jax.tree.map(lambda x, i=i: np.asarray(x[i]), data) for i, k in enumerate(MESHES)}
    rows[None] = jax.tree.map(np.zeros_like, rows["cube"])  # for primitives (ignored)
    return rows


def _random_q(rng, scale):
    q = np.zeros(14)
    q[0:3] = rng.normal(size=3) * 0.02
    q[3:7] = rng.normal(size=4)
    q[7:10] = rng.normal(size=3) * scale
    q[10:14] = rng.normal(size=4)
    q[3:7] /= np.linalg.norm(q[3:7])
    q[10:14] /= np.linalg.norm(q[10:14])
    return q


def _case(m, d, a, b, rows, q, tag):
    d.qpos[:] = q
    mujoco.mj_forward(m, d)
    ref = [dict(dist=float(c.dist), pos=np.array(c.pos), frame=np.array(c.frame).reshape(3, 3))
           for c in d.contact[:d.ncon]]
    g1 = geom_of(m, d, 0, rows[a[1] if a[0] == "mesh" else None])
    g2 = geom_of(m, d, 1, rows[b[1] if b[0] == "mesh" else None])
    return dict(t1=T[a[0]], t2=T[b[0]], g1=g1, g2=g2, margin=pair_margin(m, 0, 1), ref=ref,
                pair=(a[0], b[0]), tag=tag)


# smooth pairs apart by less than their margin (MuJoCo 4.0's GJK on the bare shapes)
SHALLOW = [(("ellipsoid", ".3 .1 .2"), ("ellipsoid", ".02 .4 .3")),
           (("ellipsoid", ".3 .1 .2"), ("cylinder", ".2 .3")),
           (("ellipsoid", ".3 .1 .2"), ("box", ".2 .25 .3")),
           (("ellipsoid", ".3 .1 .2"), ("mesh", "tet")),
           (("cylinder", ".2 .3"), ("mesh", "ico"))]


def _shallow_cases(rows, rng, margin=0.03):
    """Random orientations, the second geom moved along a random direction until MuJoCo's
    mj_geomDistance is a fraction of the margin."""
    cases = []
    for a, b in SHALLOW:
        m = mujoco.MjModel.from_xml_string(_xml(a, b, margin))
        d = mujoco.MjData(m)
        for frac in (0.1, 0.5, 0.9):
            q = _random_q(rng, 0.0)
            u = rng.normal(size=3)
            u /= np.linalg.norm(u)
            lo, hi = 0.0, 2.0  # distance along u: overlapping at lo, apart at hi
            for _ in range(60):
                q[7:10] = q[0:3] + u * (lo + hi) / 2
                d.qpos[:] = q
                mujoco.mj_kinematics(m, d)
                if mujoco.mj_geomDistance(m, d, 0, 1, 1.0, None) < frac * margin:
                    lo = (lo + hi) / 2
                else:
                    hi = (lo + hi) / 2
            cases.append(_case(m, d, a, b, rows, q, "shallow"))
    return cases


@pytest.fixture(scope="module")
def results(mesh_rows):
    return build_results(mesh_rows)


def build_results(mesh_rows):
    """All mjc_Convex cases through one compiled function; (cases, our Contacts)."""
    rng = np.random.default_rng(0)
    cases = []
    for a, b in PAIRS:
        for margin in (0.0, 0.03):
            m = mujoco.MjModel.from_xml_string(_xml(a, b, margin))
            d = mujoco.MjData(m)
            for scale in (0.12, 0.3, 0.5):
                for _ in range(8):
                    cases.append(_case(m, d, a, b, mesh_rows, _random_q(rng, scale), "random"))
    # a box resting on the cube mesh's top face: flat face-face contacts
    a, b = ("mesh", "cube"), ("box", ".2 .25 .3")
    for margin in (0.0, 0.02):
        m = mujoco.MjModel.from_xml_string(_xml(b, a, margin))
        d = mujoco.MjData(m)
        for k in range(6):
            q = np.zeros(14)
            q[2] = 0.6 - 0.002 * k  # box centre; the mesh sits at the origin
            ang = 0.3 * k
            q[3:7] = [np.cos(ang / 2), 0.01 * k, 0.0, np.sin(ang / 2)]
            q[3:7] /= np.linalg.norm(q[3:7])
            q[10:14] = [1, 0, 0, 0]
            q[7:10] = [0.05 * k, -0.03 * k, 0]
            cases.append(_case(m, d, b, a, mesh_rows, q, "resting"))
    # a cylinder's cap or side on a face (16-gon caps and side lines clipped)
    for a, b in CYL_ON:
        top = {"box": 0.3, "cylinder": 0.25, "mesh": 0.3}[b[0]]
        for margin in (0.0, 0.02):
            m = mujoco.MjModel.from_xml_string(_xml(a, b, margin))
            d = mujoco.MjData(m)
            for side in (False, True):
                for ang, depth in ((0.0, 0.001), (0.0, 0.0005), (0.01, 0.002), (0.04, 0.02),
                                   (0.08, 0.003), (0.1, 0.004)):
                    q = np.zeros(14)
                    q[10:14] = [1, 0, 0, 0]
                    tilt = [np.cos(ang / 2), np.sin(ang / 2), 0, 0]
                    if side:  # axis along y, turned about itself by 0.3 first
                        lie = [np.cos(np.pi / 4), np.sin(np.pi / 4), 0, 0]
                        spin = [np.cos(0.15), 0, 0, np.sin(0.15)]
                        quat = np.zeros(4)
                        mujoco.mju_mulQuat(quat, lie, spin)
                        mujoco.mju_mulQuat(quat, [np.cos(ang / 2), 0, np.sin(ang / 2), 0],
                                           quat.copy())
                    else:
                        quat = np.array(tilt)
                    q[3:7] = quat
                    q[0:3] = [0.01, -0.02, top + (0.2 if side else 0.3) - depth]
                    cases.append(_case(m, d, a, b, mesh_rows, q, "cylinder"))
    # coincident centres (GJK then starts from the x axis)
    for a, b in PAIRS:
        m = mujoco.MjModel.from_xml_string(_xml(a, b))
        d = mujoco.MjData(m)
        q = _random_q(rng, 0.0)
        q[0:3] = q[7:10] = 0.0
        cases.append(_case(m, d, a, b, mesh_rows, q, "coincident"))
    cases += _shallow_cases(mesh_rows, rng)
    fn = jax.jit(jax.vmap(lambda t1, t2, g1, g2, mg: cv.convex(t1, t2, g1, g2, mg)))
    stack = lambda xs: jax.tree.map(lambda *v: np.stack(v), *xs)  # noqa: E731
    out = fn(np.array([c["t1"] for c in cases], np.int32), np.array([c["t2"] for c in cases],
                                                                   np.int32),
             stack([c["g1"] for c in cases]), stack([c["g2"] for c in cases]),
             np.array([c["margin"] for c in cases]))
    out = jax.tree.map(np.asarray, out)
    return cases, out


def _tols(pair, margin):
    """(position, normal) tolerances: EPA on smooth shapes (a margin rounds polytopes) often
    stops at the iteration limit, where rounding differences (XLA's FMA) move the witness
    points."""
    smooth = {"sphere", "capsule", "ellipsoid", "cylinder"} & set(pair) or margin > 0
    return (1e-3, 5e-3) if smooth else (1e-6, 1e-6)


def _check(c, ours, where):
    """Compares one case; returns what was left out ("clipped", "quad") or None."""
    mine, ref = ours_list(ours), c["ref"]
    # contact presence
    assert bool(mine) == bool(ref), f"{where}: ours {len(mine)} contacts, MuJoCo {len(ref)}"
    if not ref:
        return None
    if c["pair"] in CLIPPED_4_0 and len(ref) > 1:
        return "clipped"
    assert len(mine) == len(ref), f"{where}: ours {len(mine)} contacts, MuJoCo {len(ref)}"
    tol, ftol = _tols(c["pair"], c["margin"])
    if len(ref) == 4 and "cylinder" in c["pair"]:
        # a clipped 16-gon cap: MuJoCo 4.0 often keeps another quadrilateral of it
        for o in mine:
            assert np.abs(o["frame"][0] - ref[0]["frame"][0]).max() < ftol, where
        return "quad"
    # the deepest distance, then every contact
    assert abs(min(o["dist"] for o in mine) - min(r["dist"] for r in ref)) < 1e-6, where
    for r in ref:
        e = min(abs(o["dist"] - r["dist"]) for o in mine)
        assert e < 1e-6, f"{where}: dist error {e:.2g}"
    if c["tag"] == "coincident" and len(ref) == 1:
        # coincident centres of centrally symmetric shapes: the depth along n and along -n
        # tie, and which EPA face wins is decided by rounding (it has varied between CPUs);
        # the mirrored contact (about the common centre) is the same answer
        r = ref[0]
        mirror = dict(r, pos=2 * c["g1"].pos - r["pos"], frame=-np.asarray(r["frame"]))
        if np.abs(mine[0]["pos"] - mirror["pos"]).max() < tol:
            ref = [mirror]
    assert_same_contacts(ours, ref, tol=tol, frame_tol=ftol)
    return None


def test_every_pair_against_mujoco(results):
    cases, out = results
    left = {}
    for i, c in enumerate(cases):
        ours = jax.tree.map(lambda x, i=i: x[i], out)
        why = _check(c, ours, f"case {i} {c['pair']} {c['tag']}")
        if why:
            left[why] = left.get(why, 0) + 1
    # the poses left out are few
    assert sum(left.values()) < 0.1 * len(cases), left


def test_shallow_contacts_of_smooth_shapes(results):
    """Apart by less than the margin: MuJoCo 4.0 measures the bare shapes' distance (GJK to
    its duality-gap bound) and moves the witness points out by the margins; inflating the
    shapes and running EPA stops elsewhere (the fly's mouthparts: 8e-7 off at tolerance
    1e-6). Distances and normals agree far below the CCD tolerance."""
    cases, out = results
    n = 0
    for i, c in enumerate(cases):
        if c["tag"] != "shallow":
            continue
        mine = ours_list(jax.tree.map(lambda x, i=i: x[i], out))
        assert len(mine) == len(c["ref"]) >= 1, (c["pair"], len(c["ref"]), len(mine))
        for r in c["ref"]:
            o = min(mine, key=lambda o, r=r: np.abs(o["pos"] - r["pos"]).max())
            assert 0 < r["dist"] < c["margin"]
            assert abs(o["dist"] - r["dist"]) < 1e-10, (c["pair"], o["dist"] - r["dist"])
            # the normal is known to the square root of GJK's stopping gap: rounding moves it
            assert np.abs(o["frame"][0] - r["frame"][0]).max() < 1e-4, c["pair"]
            assert np.abs(o["pos"] - r["pos"]).max() < 1e-6, c["pair"]
        n += 1
    assert n == 3 * len(SHALLOW)


def test_pairs_cover_the_table():
    table = cv.functions()
    for a, b in PAIRS:
        assert (T[a[0]], T[b[0]]) in table
    assert (T["plane"], T["ellipsoid"]) in table and (T["plane"], T["mesh"]) in table
    assert table[(T["box"], T["mesh"])][1] == 5 and table[(T["sphere"], T["mesh"])][1] == 1
    opt = jaxsim.load_string('<mujoco><option><flag multiccd="disable"/></option>'
                             '<worldbody><geom size=".1"/></worldbody></mujoco>').opt
    assert cv.functions(opt)[(T["box"], T["mesh"])][1] == 1


def test_resting_box_face_contacts(results):
    """A box on a mesh face: up to four clipped contacts, near points kept with a margin."""
    cases, out = results
    counts = []
    for i, c in enumerate(cases):
        if c["tag"] == "resting":
            _check(c, jax.tree.map(lambda x, i=i: x[i], out), f"case {i}")
            counts.append(len(c["ref"]))
    assert max(counts) == 4 and 2 in counts


def test_cylinder_face_contacts(results):
    """A cylinder's cap or side on a box, cylinder or mesh face (MuJoCo 4.0 clips its
    16-gon caps and its side lines): up to four contacts, two for a side."""
    cases, out = results
    counts, exact = [], 0
    for i, c in enumerate(cases):
        if c["tag"] == "cylinder":
            why = _check(c, jax.tree.map(lambda x, i=i: x[i], out), f"case {i} {c['pair']}")
            counts.append(len(c["ref"]))
            exact += why is None
    assert 4 in counts and 2 in counts and 1 in counts
    assert exact >= 0.5 * len(counts), (exact, len(counts))  # the rest: "quad" (see top)


def test_mesh_data_matches_mujoco(mesh_rows):
    """Vertices, rbound and the hull polygons (MuJoCo's mesh_polyvert) of the builder."""
    xml = (f'<mujoco><asset>{ASSETS}</asset><worldbody>'
           + "".join(f'<geom type="mesh" mesh="{k}"/>' for k in MESHES) + '</worldbody></mujoco>')
    m = mujoco.MjModel.from_xml_string(xml)
    for i, k in enumerate(MESHES):
        row = mesh_rows[k]
        n = int(row.nvert)
        adr = m.mesh_vertadr[i]
        np.testing.assert_allclose(row.vert[:n], m.mesh_vert[adr:adr + n], atol=1e-7)
        assert np.all(row.vert[n:] == row.vert[0])
        assert abs(float(row.rbound) - m.geom_rbound[i]) < 1e-6
        ours = {tuple(int(v) for v in p[:nv]) for p, nv in zip(row.poly_vert, row.poly_nvert,
                                                               strict=True) if nv > 0}
        ref = {tuple(int(v) for v in m.mesh_polyvert[m.mesh_polyvertadr[q]:
                                                     m.mesh_polyvertadr[q]
                                                     + m.mesh_polyvertnum[q]])
               for q in range(m.mesh_polyadr[i], m.mesh_polyadr[i] + m.mesh_polynum[i])}
        assert ours == ref, k
        qa = m.mesh_polyadr[i]
        ref_n = {tuple(m.mesh_polyvert[m.mesh_polyvertadr[q]:m.mesh_polyvertadr[q]
                                       + m.mesh_polyvertnum[q]]): m.mesh_polynormal[q]
                 for q in range(qa, qa + m.mesh_polynum[i])}
        for p, nv, nrm in zip(row.poly_vert, row.poly_nvert, row.poly_normal, strict=True):
            if nv > 0:
                np.testing.assert_allclose(nrm, ref_n[tuple(int(v) for v in p[:nv])],
                                           rtol=0, atol=1e-10)


@pytest.mark.parametrize("kind", ["ellipsoid", "tet", "cube", "ico"])
def test_plane_convex(kind, mesh_rows):
    """mjc_PlaneConvex: the same contacts as MuJoCo (meshes with polygons of at most
    four vertices: the rule for larger polygons is not fully MuJoCo's)."""
    b = ("ellipsoid", ".3 .1 .2") if kind == "ellipsoid" else ("mesh", kind)
    rng = np.random.default_rng(1)
    cases = []
    for margin in (0.0, 0.05):
        xml = (f'<mujoco><asset>{ASSETS}</asset><worldbody>'
               f'<geom type="plane" size="5 5 .1" margin="{margin}" euler="10 -20 0"/>'
               f'<body><freejoint/>{_geom_xml(b)}</body></worldbody></mujoco>')
        m = mujoco.MjModel.from_xml_string(xml)
        d = mujoco.MjData(m)
        for _ in range(30):
            q = _random_q(rng, 0.0)[7:]
            q[:3] = rng.normal(size=3) * 0.2
            d.qpos[:] = q
            mujoco.mj_forward(m, d)
            ref = [dict(dist=float(c.dist), pos=np.array(c.pos),
                        frame=np.array(c.frame).reshape(3, 3)) for c in d.contact[:d.ncon]]
            cases.append((geom_of(m, d, 0), geom_of(m, d, 1, mesh_rows.get(b[1])),
                          pair_margin(m, 0, 1), ref))
    stack = lambda xs: jax.tree.map(lambda *v: np.stack(v), *xs)  # noqa: E731
    fn = jax.jit(jax.vmap(lambda g1, g2, mg: cv.plane_convex(T[b[0]], g1, g2, mg)))
    out = fn(stack([c[0] for c in cases]), stack([c[1] for c in cases]),
             np.array([c[2] for c in cases]))
    hits = more = 0
    for i, (_, _, _, ref) in enumerate(cases):
        ours = jax.tree.map(lambda x, i=i: np.asarray(x[i]), out)
        mine = ours_list(ours)
        assert bool(mine) == bool(ref), i
        if not ref:
            continue
        hits += 1
        more += len(ref) > 1
        assert_same_contacts(ours, ref, tol=1e-9, frame_tol=1e-12)
    assert hits > 10
    assert kind == "ellipsoid" or more > 5  # the multi-contact rule is exercised


def test_gradient_is_finite(mesh_rows):
    """d(sum of valid distances)/d(positions) is finite: contact, deep, coincident, touching."""
    cube = mesh_rows["cube"]
    g1 = cv.Geom(np.zeros(3), np.eye(3), np.array([0.2, 0.25, 0.3]))
    g2 = cv.Geom(np.zeros(3), np.eye(3), np.zeros(3), cube)

    def loss(p1, p2, m1):
        def one(a, b, r):
            c = cv.convex(cv.BOX, cv.MESH, g1._replace(pos=a, mat=r), g2._replace(pos=b), 0.01)
            return jnp.sum(jnp.where(c.valid, c.dist, 0.0))
        return jnp.sum(jax.vmap(one)(p1, p2, m1))

    rot = np.array([[np.cos(0.3), -np.sin(0.3), 0], [np.sin(0.3), np.cos(0.3), 0], [0, 0, 1]])
    p1 = np.array([[0, 0, 0.55], [0, 0, 0.6], [0, 0, 0], [0.1, 0.2, 0.3], [0, 0, 0.59]])
    p2 = np.zeros((5, 3))
    m1 = np.stack([np.eye(3), rot, np.eye(3), rot, np.eye(3)])
    val, (d1, d2) = jax.jit(jax.value_and_grad(loss, argnums=(0, 1)))(p1, p2, m1)
    assert np.isfinite(val)
    assert np.all(np.isfinite(d1)) and np.all(np.isfinite(d2))
    # a resting box: the distances of its four contacts move with its height
    assert np.allclose(d1[0], [0, 0, 4], atol=1e-9) and np.allclose(d2[0], [0, 0, -4], atol=1e-9)


_CAPSULE_ON_MESH = """<mujoco><option>{flag}</option><asset>
  <mesh name="slab" vertex="-1 -1 -1 1 -1 -1 1 1 -1 1 1 1 1 -1 1 -1 1 -1 -1 1 1 -1 -1 1"
        scale="1 1 .3"/></asset>
  <worldbody><geom type="mesh" mesh="slab" pos="0 0 -.3" {margin}/>
    <body><freejoint/><geom type="capsule" size=".03 .1"/></body></worldbody></mujoco>"""


@pytest.mark.parametrize("flag", ["", '<flag multiccd="disable"/>'])
def test_capsule_lying_on_a_mesh_face(flag):
    """MuJoCo 4.0 gives a capsule lying along a mesh face two contacts (its axis ends offset
    towards the face, clipped by the face's edges) while the axis is within mjEDGE_TOL of
    the face and both ends touch; otherwise, or without multiCCD, the single EPA contact.
    Poses: flat, tilted either side of the EDGE_TOL boundary (5.075 and 5.1 degrees),
    shallow (axis above the face) and deep, turned about the vertical, over the slab's edge
    (clipped there) and with a margin. (Not covered: a tilted capsule whose end reaches over
    the face's edge, where MuJoCo's distances are deeper than ours by radius * (n.u)^2 / 2.)"""
    from jaxsim import smooth
    from jaxsim.collision import driver

    collide = jax.jit(lambda mo, s: driver.collision(mo, smooth.kinematics(mo, s)))
    counts = set()
    for margin in ("", 'margin=".01"'):
        xml = _CAPSULE_ON_MESH.format(flag=flag, margin=margin)
        m = mujoco.MjModel.from_xml_string(xml)
        d = mujoco.MjData(m)
        model = jaxsim.load_string(xml, dtype=jnp.float64)
        for x, z, tilt, yaw in [(0, .02, 0, 0), (0, .02, 1, 30), (0, .02, 5, 0), (0, -.05, 5.075, 70),
                                (0, -.05, 5.1, 0), (0, .02, 7, 10), (.95, .02, 0, 0),
                                (.95, -.01, 0, 45), (.3, -.04, 3, 120), (0, .035, 0.5, 0)]:
            d.qpos[:3] = [x, 0, z]
            q = np.zeros(4)
            mujoco.mju_euler2Quat(q, np.radians([0, 90 + tilt, yaw]), "xyz")
            d.qpos[3:7] = q
            mujoco.mj_forward(m, d)
            out = collide(model, jaxsim.make_state(model).replace(qpos=jnp.asarray(d.qpos)))
            act = np.asarray(out.contact.active)
            ours = np.sort(np.asarray(out.contact.dist)[act])
            ref = np.sort(d.contact.dist[:d.ncon])
            where = f"x={x} z={z} tilt={tilt} yaw={yaw} {margin} {flag}"
            assert len(ours) == len(ref), (where, ours, ref)
            np.testing.assert_allclose(ours, ref, atol=1e-6, err_msg=where)
            ref_pos = sorted(d.contact.pos[:d.ncon].tolist())
            our_pos = sorted(np.asarray(out.contact.pos)[act].tolist())
            # single contacts come from EPA on the capsule (see _tols: smooth shapes)
            ptol = 1e-5 if len(ref) == 2 else 1e-3
            np.testing.assert_allclose(our_pos, ref_pos, atol=ptol, err_msg=where)
            counts.add(len(ref))
    assert ({1, 2} <= counts) if not flag else (1 in counts and 2 not in counts), counts


def _cube_asset(scale):
    return (f"<asset><mesh name='cube' scale='{scale} {scale} {scale}' vertex='-1 -1 -1 1 -1 -1 "
            "-1 1 -1 1 1 -1 -1 -1 1 1 -1 1 -1 1 1 1 1 1'/></asset>")


def _ours_at_poses(xml, qs):
    """Our contacts (dist, pos) of a model whose qpos is one free joint, at each pose of qs
    (one vmapped collision call)."""
    from jaxsim import smooth
    from jaxsim.collision import driver
    model = jaxsim.load_string(xml, dtype=jnp.float64)
    state = jaxsim.make_state(model)
    out = jax.jit(jax.vmap(lambda q: driver.collision(
        model, smooth.kinematics(model, state.replace(qpos=q)))))(jnp.asarray(np.array(qs)))
    act = np.asarray(out.contact.active).astype(bool)
    dist, pos = np.asarray(out.contact.dist), np.asarray(out.contact.pos)
    return [(dist[i][act[i]], pos[i][act[i]]) for i in range(len(qs))]


def _same_contacts(ours, ref, tol):
    """Each of MuJoCo's (dist, pos) contacts has one of ours within tol, counts equal."""
    dist, pos = ours
    return len(dist) == len(ref) and all(
        np.min(np.abs(dist - rd) + np.abs(pos - rp).max(1)) < tol for rd, rp in ref)


def test_box_on_mesh_face_quadrilateral():
    """A mesh cube resting on a box face, turned and tilted so that the clipped polygon has
    five or six points: the four contacts MuJoCo 4.0 keeps (its quadrilateral search over
    the polygon of the mesh face clipped by the box face), positions and distances."""
    xml = (f"<mujoco>{_cube_asset(.3)}<worldbody><geom type='box' size='.5 .5 .1' "
           "pos='0 0 -.1'/><body><freejoint/><geom type='mesh' mesh='cube'/></body>"
           "</worldbody></mujoco>")
    m = mujoco.MjModel.from_xml_string(xml)
    d = mujoco.MjData(m)
    rng = np.random.default_rng(3)
    qs, refs = [], []
    while len(qs) < 24:
        q = np.zeros(7)
        q[:2] = rng.uniform(-0.5, 0.5, 2)
        q[2] = 0.29 + rng.uniform(-0.005, 0.005)
        mujoco.mju_euler2Quat(q[3:], np.radians([*rng.normal(0, 0.5, 2), rng.uniform(0, 90)]),
                              "xyz")
        d.qpos[:] = q
        mujoco.mj_forward(m, d)
        if d.ncon == 4:
            qs.append(q)
            refs.append([(c.dist, c.pos.copy()) for c in d.contact[:4]])
    ours = _ours_at_poses(xml, qs)
    assert all(len(o[0]) == 4 for o in ours)
    same = sum(_same_contacts(o, ref, 1e-9) for o, ref in zip(ours, refs, strict=True))
    # exact ties of two quadrilaterals' areas (parallel edges of square faces) are decided by
    # rounding: the rest are MuJoCo's contacts
    assert same >= len(refs) - 2, (same, len(refs))


def _icosphere(level):
    """Vertices of a subdivided icosahedron on the unit sphere."""
    t = (1 + 5 ** 0.5) / 2
    v = [(-1, t, 0), (1, t, 0), (-1, -t, 0), (1, -t, 0), (0, -1, t), (0, 1, t), (0, -1, -t),
         (0, 1, -t), (t, 0, -1), (t, 0, 1), (-t, 0, -1), (-t, 0, 1)]
    v = [np.array(p, float) / np.linalg.norm(p) for p in v]
    f = [(0, 11, 5), (0, 5, 1), (0, 1, 7), (0, 7, 10), (0, 10, 11), (1, 5, 9), (5, 11, 4),
         (11, 10, 2), (10, 7, 6), (7, 1, 8), (3, 9, 4), (3, 4, 2), (3, 2, 6), (3, 6, 8),
         (3, 8, 9), (4, 9, 5), (2, 4, 11), (6, 2, 10), (8, 6, 7), (9, 8, 1)]
    for _ in range(level):
        mid, nf = {}, []
        for a, b, c in f:
            ids = []
            for e in ((a, b), (b, c), (c, a)):
                if e[::-1] not in mid:
                    p = v[e[0]] + v[e[1]]
                    v.append(p / np.linalg.norm(p))
                    mid[e] = len(v) - 1
                ids.append(mid.get(e, mid.get(e[::-1])))
            ab, bc, ca = ids
            nf += [(a, ab, ca), (b, bc, ab), (c, ca, bc), (ab, bc, ca)]
        f = nf
    return np.array(v)


def test_mesh_spheres_aligned_face_choice():
    """Two polyhedral spheres (1280 faces) pressed together: several face pairs at EPA's
    feature are within mjFACE_TOL of opposite, and MuJoCo 4.0 clips the most nearly opposite
    pair (the first pair in the polygon lists gives other contacts): all contacts as
    MuJoCo's."""
    vert = " ".join(f"{x:.12f}" for x in _icosphere(3).ravel())
    xml = (f"<mujoco><asset><mesh name='s' scale='.1 .1 .1' vertex='{vert}'/></asset>"
           "<worldbody><body><geom type='mesh' mesh='s'/></body>"
           "<body><freejoint/><geom type='mesh' mesh='s'/></body></worldbody></mujoco>")
    m = mujoco.MjModel.from_xml_string(xml)
    d = mujoco.MjData(m)
    rng = np.random.default_rng(5)
    qs, refs = [], []
    for _ in range(40):
        q = np.zeros(7)
        u = rng.normal(size=3)
        q[:3] = u / np.linalg.norm(u) * rng.uniform(0.15, 0.19)
        q[3:] = rng.normal(size=4)
        q[3:] /= np.linalg.norm(q[3:])
        d.qpos[:] = q
        mujoco.mj_forward(m, d)
        qs.append(q)
        refs.append([(c.dist, c.pos.copy()) for c in d.contact[:d.ncon]])
    ours = _ours_at_poses(xml, qs)
    assert sum(len(r) > 1 for r in refs) >= 10
    # distances and positions to rounding: each clipped point's distance is measured back to
    # the point itself along the second face's normal (the float32 vertices of a face are
    # not exactly coplanar, so a plane through one of them is off by ~1e-9)
    same = sum(_same_contacts(o, ref, 1e-12) for o, ref in zip(ours, refs, strict=True))
    assert same >= len(refs) - 2, (same, len(refs))


def test_capsule_across_a_mesh_edge():
    """A capsule lying parallel to a mesh cube's top face, moved out across its edge: the
    contact normal tilts from the face's, and MuJoCo 4.0 still clips the capsule (offset
    along the normal's part perpendicular to the axis) by that face: two contacts."""
    xml = (f"<mujoco>{_cube_asset(.1)}<worldbody><body><geom type='mesh' mesh='cube'/></body>"
           "<body><freejoint/><geom type='capsule' size='.05 .15'/></body></worldbody>"
           "</mujoco>")
    m = mujoco.MjModel.from_xml_string(xml)
    d = mujoco.MjData(m)
    qs, refs = [], []
    for y in (0.0, 0.05, 0.09, 0.105, 0.11, 0.12, 0.13):
        for yaw, roll in ((0.0, 0.0), (25.0, 0.0), (0.0, 3.0)):
            q = np.zeros(7)
            q[:3] = [0.0, y, 0.14]
            qz = [np.cos(np.radians(yaw) / 2), 0, 0, np.sin(np.radians(yaw) / 2)]
            qx = [np.cos(np.radians(roll) / 2), np.sin(np.radians(roll) / 2), 0, 0]
            tmp = np.zeros(4)
            mujoco.mju_mulQuat(tmp, qx, [np.cos(np.pi / 4), 0, np.sin(np.pi / 4), 0])
            mujoco.mju_mulQuat(q[3:], qz, tmp)
            d.qpos[:] = q
            mujoco.mj_forward(m, d)
            qs.append(q)
            refs.append([(c.dist, c.pos.copy()) for c in d.contact[:d.ncon]])
    assert sum(len(r) == 2 for r in refs) >= 12
    for i, (o, ref) in enumerate(zip(_ours_at_poses(xml, qs), refs, strict=True)):
        assert _same_contacts(o, ref, 1e-9), (i, o, ref)


@pytest.mark.parametrize("option", ["", "margin", "multiccd off"])
def test_capsule_lying_on_a_cylinder_cap(option):
    """A capsule lying across a (tilted) cylinder's cap, turned about the cap normal, shifted
    and tilted by up to a few degrees: MuJoCo 4.0 clips the capsule's axis by the cap's 16-gon
    and keeps the clipped points below the face, which gives two contacts, one, or two
    equal ones (an end cut by the rim, the other end above the face); without multiCCD the
    single EPA contact."""
    flag = '<option><flag multiccd="disable"/></option>' if option == "multiccd off" else ""
    margin = 'margin=".01"' if option == "margin" else ""
    xml = (f"<mujoco>{flag}<worldbody><geom type='cylinder' size='.1 .05' euler='20 30 0' "
           f"{margin}/><body><freejoint/><geom type='capsule' size='.4 .3'/></body>"
           "</worldbody></mujoco>")
    m = mujoco.MjModel.from_xml_string(xml)
    d = mujoco.MjData(m)
    mujoco.mj_forward(m, d)
    R = d.geom_xmat[0].reshape(3, 3)
    rng = np.random.default_rng(3)
    qs, refs = [], []
    for i in range(24):
        tilt = rng.normal(size=3) * (3e-2 if i % 2 == 0 else 1e-3)
        q = np.zeros(7)
        lq, cq = np.zeros(4), np.zeros(4)
        mujoco.mju_euler2Quat(lq, np.array([0, np.pi / 2, rng.uniform(0, np.pi)]) + tilt, "zyx")
        mujoco.mju_mat2Quat(cq, R.ravel())
        mujoco.mju_mulQuat(q[3:], cq, lq)
        q[:3] = R @ [rng.uniform(-.08, .08), rng.uniform(-.08, .08), .45 - rng.uniform(-2e-3, 3e-3)]
        d.qpos[:] = q
        mujoco.mj_forward(m, d)
        qs.append(q)
        refs.append([(c.dist, c.pos.copy()) for c in d.contact[:d.ncon]])
    counts = [len(r) for r in refs]
    if option == "multiccd off":
        assert set(counts) == {0, 1}, counts
    else:
        equal = sum(len(r) == 2 and np.allclose(r[0][1], r[1][1]) for r in refs)
        assert counts.count(2) - equal >= 8 and (equal >= 2 or option), (counts, equal)
    for i, (o, ref) in enumerate(zip(_ours_at_poses(xml, qs), refs, strict=True)):
        # single contacts from EPA on the capsule (smooth shapes): see the module docstring
        assert _same_contacts(o, ref, 1e-3 if len(ref) == 1 else 1e-6), (i, o, ref)


def test_box_edge_or_face_on_a_cylinder_rim():
    """A thin box tilted over a fixed cylinder's cap, its low edge over the cap or near the
    rim: faces within mjFACE_TOL give four contacts, the edge lying on the cap two (EPA's
    direction is the cap normal), and the rim pressed into the tilted face by the edge one:
    EPA's direction is then the face's, more than mjFACE_TOL off the cap, and the edge on
    the cap does not count (MuJoCo 4.0; the poses of corpus boxbox_bad1)."""
    xml = ("<mujoco><worldbody><geom type='cylinder' size='.01 .0175'/><body><freejoint/>"
           "<geom type='box' size='.1 .02 .005'/></body></worldbody></mujoco>")
    m = mujoco.MjModel.from_xml_string(xml)
    d = mujoco.MjData(m)
    qs, refs = [], []
    for centre_x, dz in ((0.0887573, 0.0), (0.0887573, -0.002), (0.0955, 0.0)):
        for deg in (2, 4, 6.5, 7.14, 8, 10):
            for dy in (0.0, 0.003):
                a = np.radians(deg)
                q = np.zeros(7)
                q[:3] = [centre_x, dy, 0.0224225 + dz]
                q[3:] = [np.cos(a / 2), 0, -np.sin(a / 2), 0]
                d.qpos[:] = q
                mujoco.mj_forward(m, d)
                qs.append(q)
                refs.append([(c.dist, c.pos.copy()) for c in d.contact[:d.ncon]])
    assert {len(r) for r in refs} == {1, 2, 4}, [len(r) for r in refs]
    for i, (o, ref) in enumerate(zip(_ours_at_poses(xml, qs), refs, strict=True)):
        assert len(o[0]) == len(ref), (i, o, ref)
        if len(ref) < 4:  # EPA's point on the rim (a smooth edge) to its tolerance
            assert _same_contacts(o, ref, 1e-9 if len(ref) == 2 else 1e-6), (i, o, ref)
        else:  # a cap under a box face: which quadrilateral of it, see the module docstring
            common = sum(np.min(np.abs(o[0] - rd) + np.abs(o[1] - rp).max(1)) < 1e-9
                         for rd, rp in ref)
            assert common >= 1, (i, o, ref)


def test_cylinder_cap_on_a_cylinder_cap():
    """A cylinder standing on a wider one's cap, turned about its axis and shifted: its cap
    (a regular 16-gon) is the clipped polygon, whose inscribed quadrilaterals tie in area in
    many ways; MuJoCo 4.0 keeps the first found of equal areas, rounding aside."""
    xml = ("<mujoco><worldbody><geom type='cylinder' size='.5 .1' pos='0 0 -.1'/><body>"
           "<freejoint/><geom type='cylinder' size='.2 .3'/></body></worldbody></mujoco>")
    m = mujoco.MjModel.from_xml_string(xml)
    d = mujoco.MjData(m)
    rng = np.random.default_rng(1)
    qs, refs = [], []
    for _ in range(20):
        th = rng.uniform(0, 2 * np.pi)
        q = np.zeros(7)
        q[:3] = [*rng.normal(size=2) * 0.03, 0.3 - 0.001]
        q[3:] = [np.cos(th / 2), 0, 0, np.sin(th / 2)]
        d.qpos[:] = q
        mujoco.mj_forward(m, d)
        qs.append(q)
        refs.append([(c.dist, c.pos.copy()) for c in d.contact[:d.ncon]])
    assert all(len(r) == 4 for r in refs)
    same = sum(_same_contacts(o, ref, 1e-9) for o, ref in zip(_ours_at_poses(xml, qs), refs,
                                                               strict=True))
    assert same >= len(refs) - 1, (same, len(refs))
