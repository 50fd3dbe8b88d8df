"""Mesh compiler tests: jaxsim.mjcf.mesh against MuJoCo's compiled models."""

import glob
import os
import struct
from pathlib import Path

import numpy as np
import pytest

from jaxsim.mjcf import mesh as M

SHARED = Path(__file__).parents[1].parent / "shared"
CORPUS = SHARED / "corpus" / "mujoco"
TESTDATA = CORPUS / "user" / "testdata"

mujoco = pytest.importorskip("mujoco")
SITE = Path(mujoco.__file__).parent
GYM = SITE.parent / "gymnasium" / "envs" / "mujoco" / "assets"


def _models():
    files = sorted(glob.glob(str(CORPUS / "**" / "*.xml"), recursive=True))
    files += sorted(glob.glob(str(SITE / "mjx" / "test_data" / "**" / "*.xml"),
                              recursive=True))
    files += sorted(glob.glob(str(GYM / "*.xml")))
    out = []
    for f in files:
        with open(f, errors="ignore") as fh:
            if "<mesh" in fh.read():
                out.append(f)
    return out


MODELS = _models() if CORPUS.exists() else []
_MODES = {int(getattr(mujoco.mjtMeshInertia, "mjMESH_INERTIA_" + n.upper())): n
          for n in M.INERTIA_MODES}


def _neighbour_sets(graph):
    nv, nf = int(graph[0]), int(graph[1])
    edges = graph[2 + 2 * nv:2 + 3 * nv + 3 * nf]
    return [frozenset(x) for x in np.split(edges, np.nonzero(edges == -1)[0] + 1)]


@pytest.mark.skipif(not MODELS, reason="shared corpus not available")
@pytest.mark.parametrize("path", MODELS, ids=lambda p: os.path.relpath(p, SHARED.parent))
def test_mesh_matches_mujoco(path):
    try:
        m = mujoco.MjModel.from_xml_path(path)
    except ValueError:
        pytest.skip("MuJoCo rejects this model")
    spec = mujoco.MjSpec.from_file(path)
    if len(spec.meshes) != m.nmesh:
        pytest.skip("meshes discarded at compile time")
    meshdir = os.path.join(os.path.dirname(path), spec.compiler.meshdir or "")
    for i, sm in enumerate(spec.meshes):
        if sm.file:
            fp = os.path.join(meshdir, sm.file)
            with open(fp, "rb") as fh:
                raw = M.read_mesh_file(fh.read(), fp, sm.content_type or None)
        elif len(sm.uservert):
            raw = M.raw_from_user(sm.uservert, sm.userface)
        else:
            continue  # plugin (sdf) meshes
        pm = M.process_mesh(raw, scale=sm.scale, refpos=sm.refpos, refquat=sm.refquat,
                            inertia_mode=_MODES[int(sm.inertia)],
                            maxhullvert=sm.maxhullvert,
                            need_hull=m.mesh_graphadr[i] >= 0, name=sm.name)
        va, vn = m.mesh_vertadr[i], m.mesh_vertnum[i]
        fa, fn = m.mesh_faceadr[i], m.mesh_facenum[i]
        mv = m.mesh_vert[va:va + vn]
        assert pm.vert.shape == mv.shape
        # float32 storage, bit for bit (a principal frame off by 1e-11 rounds some vertex
        # to the neighbouring float32)
        np.testing.assert_array_equal(pm.vert, mv)
        np.testing.assert_array_equal(pm.face, m.mesh_face[fa:fa + fn])
        np.testing.assert_allclose(pm.pos, m.mesh_pos[i], rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(pm.quat, m.mesh_quat[i], rtol=0, atol=1e-15)
        ga = m.mesh_graphadr[i]
        if ga < 0:
            assert pm.graph is None
            continue
        g = m.mesh_graph[ga:ga + len(pm.graph)]
        nv, nf = int(g[0]), int(g[1])
        # everything but the order of each vertex's neighbour list is exact
        np.testing.assert_array_equal(pm.graph[:2 + 2 * nv], g[:2 + 2 * nv])
        np.testing.assert_array_equal(pm.graph[2 + 3 * nv + 3 * nf:], g[2 + 3 * nv + 3 * nf:])
        assert _neighbour_sets(pm.graph) == _neighbour_sets(g)
        np.testing.assert_array_equal(pm.extrema, m.mesh_extrema.reshape(-1)[27 * i:27 * i + 27])
        # hull polygons (coplanar faces merged): MuJoCo's list, in its order (which decides
        # ties between equally aligned faces in the multi-contact code), each cycle from the
        # same first vertex
        pa, pn = m.mesh_polyadr[i], m.mesh_polynum[i]
        ref = [[int(v) for v in m.mesh_polyvert[m.mesh_polyvertadr[q]:m.mesh_polyvertadr[q]
                                                + m.mesh_polyvertnum[q]]]
               for q in range(pa, pa + pn)]
        assert [[int(v) for v in q] for q in pm.polygons] == ref
        # their normals (from the double-precision vertices; a polygon of nearly coplanar
        # faces gets its area-weighted normal, which MuJoCo sums in another order: up to
        # 3e-8 apart on makemesh.xml, 1e-13 on most)
        np.testing.assert_allclose(np.reshape(pm.polynormal, (-1, 3)),
                                   m.mesh_polynormal[pa:pa + pn], rtol=0, atol=1e-7)


@pytest.mark.skipif(not CORPUS.exists(), reason="shared corpus not available")
@pytest.mark.parametrize("fname", ["fitmesh_aabb.xml", "fitmesh_inertiabox.xml"])
def test_fit_geom(fname):
    path = TESTDATA / fname
    m = mujoco.MjModel.from_xml_path(str(path))
    with open(TESTDATA / "stanford_bunny.obj", "rb") as fh:
        raw = M.read_mesh_file(fh.read(), "stanford_bunny.obj")
    text = path.read_text()
    fitaabb = 'fitaabb="true"' in text
    mode = "exact" if 'inertia="exact"' in text else "legacy"
    pm = M.process_mesh(raw, need_hull=True, inertia_mode=mode)
    types = {int(mujoco.mjtGeom.mjGEOM_SPHERE): "sphere",
             int(mujoco.mjtGeom.mjGEOM_CAPSULE): "capsule",
             int(mujoco.mjtGeom.mjGEOM_CYLINDER): "cylinder",
             int(mujoco.mjtGeom.mjGEOM_ELLIPSOID): "ellipsoid",
             int(mujoco.mjtGeom.mjGEOM_BOX): "box"}
    checked = 0
    for g in range(m.ngeom):
        gtype = int(m.geom_type[g])
        body_quat = m.body_quat[m.geom_bodyid[g]]
        if gtype == int(mujoco.mjtGeom.mjGEOM_MESH):
            size, center = np.zeros(3), np.zeros(3)
        elif gtype in types:
            size, center = M.fit_geom(pm, types[gtype], fitaabb=fitaabb)
            np.testing.assert_allclose(m.geom_size[g], size, rtol=1e-9, atol=1e-12)
        else:
            continue
        pos, quat = M.mesh_geom_frame(np.zeros(3), [1, 0, 0, 0], pm, center)
        np.testing.assert_allclose(m.geom_pos[g], pos, rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(m.geom_quat[g], quat, rtol=0, atol=1e-9)
        assert np.isfinite(body_quat).all()
        checked += 1
    assert checked >= 5


@pytest.mark.skipif(not CORPUS.exists(), reason="shared corpus not available")
def test_single_mesh_body_inertia():
    """Body mass/inertia from a lone legacy/shell mesh geom (density 1000 / 1)."""
    for fname, mode in (("torus.xml", "legacy"), ("inertia_shell.xml", "shell"),
                        ("torus_shell.xml", "shell")):
        m = mujoco.MjModel.from_xml_path(str(TESTDATA / fname))
        spec = mujoco.MjSpec.from_file(str(TESTDATA / fname))
        sm = spec.meshes[0]
        with open(TESTDATA / sm.file, "rb") as fh:
            raw = M.read_mesh_file(fh.read(), sm.file)
        pm = M.process_mesh(raw, inertia_mode=mode, need_hull=True)
        g = 0
        density = spec.geoms[0].density
        mass = density * pm.volume
        b = m.geom_bodyid[g]
        if b == 0:
            continue
        np.testing.assert_allclose(m.body_mass[b], mass, rtol=1e-9)
        bx = pm.boxsz
        inertia = mass * np.array([bx[1] ** 2 + bx[2] ** 2, bx[0] ** 2 + bx[2] ** 2,
                                   bx[0] ** 2 + bx[1] ** 2]) / 3
        np.testing.assert_allclose(np.sort(m.body_inertia[b]), np.sort(inertia), rtol=1e-9)


# ----------------------------------------------------------------------------
# malformed inputs


def test_ascii_stl_rejected():
    data = b"solid x\nfacet normal 0 0 1\nouter loop\nvertex 0 0 0\nendloop\nendfacet\nendsolid\n"
    data = data + b" " * max(0, 90 - len(data))
    with pytest.raises(M.MeshError):
        M.read_mesh_file(data, "a.stl")


def test_bad_msh_rejected():
    with pytest.raises(M.MeshError):
        M.read_mesh_file(struct.pack("<4i", 4, 0, 0, 1) + b"\0" * 10, "a.msh")
    with pytest.raises(M.MeshError):
        M.read_mesh_file(b"", "a.msh")


def test_obj_zero_index_rejected():
    with pytest.raises(M.MeshError):
        M.read_mesh_file(b"v 0 0 0\nv 1 0 0\nv 0 1 0\nf 0 1 2\n", "a.obj")


def test_obj_negative_indices_and_polygons():
    text = (b"v 0 0 0\nv 1 0 0\nv 1 1 0\nv 0 1 0\nv 0.5 1.5 0\n"
            b"f -5 -4 -3 -2\nf 1/1/1 2/2/2 3/3/3 5 4\n")
    raw = M.read_mesh_file(text, "a.obj")
    assert raw.face.shape[0] == 2 + 3
    assert raw.face.max() < 5 and raw.face.min() >= 0


def test_degenerate_meshes_rejected():
    with pytest.raises(M.MeshError, match="at least 4"):
        M.process_mesh(M.raw_from_user([0, 0, 0, 1, 0, 0, 0, 1, 0]))
    with pytest.raises(M.MeshError, match="coplanar"):
        M.process_mesh(M.raw_from_user([0, 0, 0, 1, 0, 0, 0, 1, 0, 1, 1, 0]))
    with pytest.raises(M.MeshError, match="colocated"):
        M.process_mesh(M.raw_from_user([0, 0, 0] * 4))
    with pytest.raises(M.MeshError, match="does not exist"):
        M.process_mesh(M.raw_from_user([0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1],
                                       [0, 1, 7]))
    with pytest.raises(M.MeshError, match="not finite"):
        M.raw_from_user([0, 0, np.inf, 1, 0, 0, 0, 1, 0, 0, 0, 1])


@pytest.mark.skipif(not CORPUS.exists(), reason="shared corpus not available")
def test_inconsistent_orientation_exact():
    with open(TESTDATA / "malformed_face.obj", "rb") as fh:
        raw = M.read_mesh_file(fh.read(), "malformed_face.obj")
    M.process_mesh(raw)  # legacy: accepted, as in MuJoCo
    with pytest.raises(M.MeshError, match="inconsistent orientation"):
        M.process_mesh(raw, inertia_mode="exact")


def test_negative_volume_rejected():
    # a tetrahedron with inward faces has negative volume under "exact"
    vert = [0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1]
    inward = [0, 1, 2, 0, 3, 1, 0, 2, 3, 1, 3, 2]
    with pytest.raises(M.MeshError, match="negative"):
        M.process_mesh(M.raw_from_user(vert, inward), inertia_mode="exact")
    pm = M.process_mesh(M.raw_from_user(vert, inward), inertia_mode="legacy")
    np.testing.assert_allclose(pm.volume, 1 / 6)
