"""GMSH reader (jaxsim.mjcf.gmsh) against MuJoCo's flexcomp type="gmsh": the corpus models,
the malformed corpus files, and variants of the corpus files built here (loaded by MuJoCo
from an in-memory asset). Host-only numpy; no JAX compilation."""

from __future__ import annotations

import pathlib
import struct

import mujoco
import numpy as np
import pytest
from lxml import etree

from jaxsim.mjcf import gmsh
from jaxsim.mjcf.errors import MJCFError

TESTDATA = pathlib.Path(__file__).resolve().parents[2] / "shared" / "corpus" / "mujoco" / "user" \
    / "testdata"
VALID = sorted(p.name for pat in ("cube_22_*_gmshApp*.xml", "cube_41_*_gmshApp.xml",
                                  "shark_22_*_fTetWild.xml")
               for p in TESTDATA.glob(pat))
MALFORMED_XML = sorted(p.name for p in TESTDATA.glob("malformed_cube_*.xml"))
MALFORMED_MSH = sorted(p.name for p in TESTDATA.glob("malformed_cube_*.msh"))

pytestmark = pytest.mark.skipif(not TESTDATA.is_dir(), reason="MuJoCo corpus not available")


def _orient(points: np.ndarray, elements: np.ndarray) -> np.ndarray:
    """MuJoCo's flex compiler swaps vertices 1 and 2 of a tetrahedron whose (v1-v0)x(v2-v0)
    points towards v3; flex_elem holds the result."""
    e = np.array(elements)
    if e.shape[1] == 4:
        v0, v1, v2, v3 = (points[e[:, k]] for k in range(4))
        flip = np.einsum("ij,ij->i", np.cross(v1 - v0, v2 - v0), v3 - v0) > 0
        e[flip, 1], e[flip, 2] = e[flip, 2], e[flip, 1].copy()
    return e


def _flexcomp(xml: pathlib.Path):
    return etree.parse(str(xml)).find(".//flexcomp")


@pytest.mark.parametrize("name", VALID)
def test_corpus_model(name):
    xml = TESTDATA / name
    m = mujoco.MjModel.from_xml_path(str(xml))
    fc = _flexcomp(xml)
    dim = int(fc.get("dim")) if fc.get("dim") is not None else None
    data = (xml.parent / fc.get("file")).read_bytes()
    points, elements, fdim = gmsh.read_gmsh(data, dim, where=fc)
    assert points.dtype == np.float64 and points.shape[1] == 3
    assert elements.shape[1] == fdim + 1
    assert fdim == m.flex_dim[0] and (dim is None or dim == fdim)

    pts, elem = gmsh.compact(points, elements)
    assert m.nflexvert == len(pts) and m.nbody == 1 + len(pts)
    scale = np.array(fc.get("scale", "1 1 1").split(), float)
    pos = np.array(fc.get("pos", "0 0 0").split(), float)
    world = pts * scale + pos
    np.testing.assert_allclose(m.body_pos[1:], world, rtol=0, atol=1e-12)
    np.testing.assert_array_equal(m.flex_elem.reshape(-1, fdim + 1), _orient(world, elem))


def test_missing_dim_is_taken_from_file():
    data = (TESTDATA / "cube_22_ascii_vol_gmshApp.msh").read_bytes()
    assert gmsh.read_gmsh(data, None)[2] == 3
    assert gmsh.read_gmsh(data, 3)[2] == 3
    for dim in (1, 2):
        with pytest.raises(MJCFError, match="dim"):
            gmsh.read_gmsh(data, dim)


@pytest.mark.parametrize("name", MALFORMED_XML)
def test_malformed_model(name):
    xml = TESTDATA / name
    with pytest.raises(ValueError):
        mujoco.MjModel.from_xml_path(str(xml))
    fc = _flexcomp(xml)
    with pytest.raises(MJCFError) as info:
        gmsh.read_gmsh((xml.parent / fc.get("file")).read_bytes(), None, where=fc)
    assert info.value.element.startswith("flexcomp") and info.value.line == fc.sourceline


# ---------------------------------------------------------------------------------------------
# differential tests: MuJoCo loads the same bytes from an in-memory asset

_XML = ('<mujoco><worldbody><flexcomp name="c" type="gmsh" {dim} radius="0.001" mass="1" '
        'file="x.msh"><edge equality="true"/></flexcomp></worldbody></mujoco>')


def _mujoco(data: bytes, dim: int | None):
    """(points, elements, dim) of MuJoCo's flex, or None when MuJoCo rejects the file."""
    xml = _XML.format(dim="" if dim is None else f'dim="{dim}"')
    try:
        m = mujoco.MjModel.from_xml_string(xml, assets={"x.msh": data})
    except ValueError:
        return None
    d = int(m.flex_dim[0])
    return m.body_pos[1:], m.flex_elem.reshape(-1, d + 1), d


def _ours(data: bytes, dim: int | None):
    try:
        points, elements, d = gmsh.read_gmsh(data, dim)
    except MJCFError:
        return None
    points, elements = gmsh.compact(points, elements)
    return points, _orient(points, elements), d


def _agree(data: bytes, dim: int | None = None) -> bool:
    want, got = _mujoco(data, dim), _ours(data, dim)
    assert (want is None) == (got is None), "MuJoCo " + ("rejects" if want is None else
                                                          "accepts")
    if want is not None:
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_array_equal(got[1], want[1])
        assert got[2] == want[2]
    return want is not None


def _file(name: str) -> bytes:
    return (TESTDATA / name).read_bytes()


def _sub(data: bytes, old: bytes, new: bytes) -> bytes:
    assert old in data, old
    return data.replace(old, new, 1)


def _binsec(data: bytes, tag: bytes, edit) -> bytes:
    """Applies edit to the bytes of a section (after its tag line, before its end tag)."""
    b = data.index(tag + b"\n") + len(tag) + 1
    e = data.index(b"$End" + tag[1:])
    return data[:b] + edit(data[b:e]) + data[e:]


def _put(fmt: str, off: int, value):
    return lambda s: s[:off] + struct.pack(fmt, value) + s[off + struct.calcsize(fmt):]


def _after_count(fmt: str, off: int, value):
    """Like _put, for an offset counted from the end of a 2.2 binary section's count line."""
    return lambda s: _put(fmt, s.index(b"\n") + 1 + off, value)(s)


A22V, A22S = "cube_22_ascii_vol_gmshApp.msh", "cube_22_ascii_surf_gmshApp.msh"
A41V, A41S = "cube_41_ascii_vol_gmshApp.msh", "cube_41_ascii_surf_gmshApp.msh"
B22V, B22S = "cube_22_binary_vol_gmshApp.msh", "cube_22_binary_surf_gmshApp.msh"
B41V, SHARK = "cube_41_binary_vol_gmshApp.msh", "shark_22_binary_fTetWild.msh"
NODE1 = b"\n1 -0.5 -0.5 0\n"
LINE41 = b"""$MeshFormat
4.1 0 8
$EndMeshFormat
$Nodes
1 3 1 3
1 1 0 3
1
2
3
0 0 0
1 0 0
2 0 0
$EndNodes
$Elements
1 2 1 2
1 1 1 2
1 1 2
2 2 3
$EndElements
"""

VARIANTS = {
    # layout
    "crlf": lambda: _file(A22V).replace(b"\n", b"\r\n"),
    "crlf_41": lambda: _file(A41V).replace(b"\n", b"\r\n"),
    "no_final_newline": lambda: _file(A22V).rstrip(b"\n"),
    "tabs": lambda: _file(A22V).replace(b" ", b"\t"),
    "sections_swapped": lambda: (lambda d: d[:d.index(b"$Nodes")] + d[d.index(b"$Elements"):]
                                 + d[d.index(b"$Nodes"):d.index(b"$Elements")])(_file(A22V)),
    "number_touches_end_tag": lambda: _sub(_file(A22V), b"1\n$EndNodes", b"1$EndNodes"),
    "no_nodes": lambda: _sub(_file(A22V), b"$Nodes", b"$Nodez"),
    "no_end_elements": lambda: _sub(_file(A22V), b"$EndElements", b"$EndElementz"),
    "nodes_in_comment": lambda: _sub(_file(A22V), b"$EndMeshFormat\n",
                                     b"$EndMeshFormat\n$Comments\n$Nodes\n$EndComments\n"),
    # header
    "version_2.20": lambda: _sub(_file(A22V), b"2.2 0", b"2.20 0"),
    "version_2.195": lambda: _sub(_file(A22V), b"2.2 0", b"2.195 0"),
    "version_hex": lambda: _sub(_file(A22V), b"2.2 0", b"0x1.199999999999ap+1 0"),
    "version_4.1_for_2.2": lambda: _sub(_file(A22V), b"2.2 0", b"4.1 0"),
    "version_2.2a": lambda: _sub(_file(A22V), b"2.2 0", b"2.2a 0"),
    "filetype_+0": lambda: _sub(_file(A22V), b"2.2 0", b"2.2 +0"),
    "filetype_0x0": lambda: _sub(_file(A22V), b"2.2 0", b"2.2 0x0"),
    "filetype_-1": lambda: _sub(_file(A22V), b"2.2 0", b"2.2 -1"),
    "filetype_overflow": lambda: _sub(_file(A22V), b"2.2 0", b"2.2 2147483648"),
    # ASCII numbers
    **{f"coord_{t.decode()}": (lambda t=t: _sub(_file(A22V), NODE1, b"\n1 " + t + b" -0.5 0\n"))
       for t in (b"-.5", b"+0.5", b"-5e-1", b"0x1p-1", b"-0.5x", b"inf", b"nan", b"1e400",
                 b"1e-400", b"1e-320", b"0e-999", b"-0.5e", b"- 0.5", b"0x1.8p-1074")},
    **{f"last_coord_{t.decode()}": (lambda t=t: _sub(_file(A22V), b"0 0 1\n$EndNodes",
                                                     b"0 0 " + t + b"\n$EndNodes"))
       for t in (b"1.", b"1-", b"1N", b"1e5.", b"1x", b"1e")},
    "coord_41_hex": lambda: _sub(_file(A41V), b"14\n-0.5", b"14\n-0x1p-1"),
    **{f"node_tag_{t.decode()}": (lambda t=t: _sub(_file(A22V), NODE1,
                                                   b"\n" + t + b" -0.5 -0.5 0\n"))
       for t in (b"-1", b"+1", b"1.0", b"18446744073709551616", b"+-1")},
    "count_trailing_space": lambda: _sub(_file(A22V), b"$Nodes\n14\n", b"$Nodes\n14 \n"),
    "count_blank_line_first": lambda: _sub(_file(A22V), b"$Nodes\n14\n", b"$Nodes\n\n14\n"),
    "count_plus": lambda: _sub(_file(A22V), b"$Nodes\n14\n", b"$Nodes\n+14\n"),
    # 2.2 elements
    "no_tags": lambda: _sub(_file(A22V), b"1 4 2 0 1 10", b"1 4 0 10"),
    "negative_tag_count": lambda: _sub(_file(A22V), b"2 4 2 0 1 10", b"2 4 -3 10"),
    "tag_count_5_two_tags": lambda: _sub(_file(A22V), b"2 4 2 0 1 10", b"2 4 5 0 1 10"),
    "first_type_line": lambda: _sub(_file(A22V), b"1 4 2 0 1 10 9 12 11", b"1 1 2 0 1 10 9"),
    "later_type_ignored": lambda: _sub(_file(A22V), b"2 4 2 0 1 10", b"2 15 2 0 1 10"),
    "node_tag_0": lambda: _sub(_file(A22V), b"1 4 2 0 1 10", b"1 4 2 0 1 0"),
    "node_tag_15": lambda: _sub(_file(A22V), b"1 4 2 0 1 10", b"1 4 2 0 1 15"),
    "element_count_0": lambda: _sub(_file(A22V), b"$Elements\n24\n", b"$Elements\n0\n"),
    "element_count_short": lambda: _sub(_file(A22V), b"$Elements\n24\n", b"$Elements\n23\n"),
    "node_count_short": lambda: _sub(_file(A22V), b"$Nodes\n14\n", b"$Nodes\n13\n"),
    "extra_first_node": lambda: _sub(_file(A22V), b"$Nodes\n14\n", b"$Nodes\n15\n0 7 7 7\n"),
    # 4.1
    "41_min_tag_0": lambda: _sub(_sub(_file(A41V), b"1 14 1 14\n", b"1 14 0 14\n"),
                                 b"\n".join(b"%d" % i for i in range(1, 15)),
                                 b"\n".join(b"%d" % i for i in range(14))),
    "41_element_dim_differs": lambda: _sub(_file(A41V), b"3 1 0 14", b"2 1 0 14"),
    "41_element_type": lambda: _sub(_file(A41S), b"\n2 1 2 ", b"\n2 1 4 "),
    "41_two_blocks": lambda: _sub(_file(A41V), b"1 14 1 14", b"2 14 1 14"),
    "41_parametric_ignored": lambda: _sub(_file(A41V), b"3 1 0 14", b"3 1 1 14"),
    "41_lines": lambda: LINE41,
    "41_binary_max_tag_ignored": lambda: _binsec(_file(B41V), b"$Nodes", _put("<Q", 24, 99)),
    "41_binary_min_tag_0": lambda: _binsec(_file(B41V), b"$Nodes", _put("<Q", 16, 0)),
    "41_binary_node_out_of_range": lambda: _binsec(_file(B41V), b"$Elements",
                                                   _put("<Q", 60, 15)),
    "41_binary_one_element": lambda: _binsec(_file(B41V), b"$Elements",
                                             lambda s: _put("<Q", 44, 1)(_put("<Q", 8, 1)(s))),
    "41_binary_filetype_2": lambda: _sub(_file(B41V), b"4.1 1 8", b"4.1 2 8"),
    # 2.2 binary
    "22_binary_count_0_reads_one": lambda: _binsec(_file(B22V), b"$Elements",
                                                   lambda s: b"0" + s[s.index(b"\n"):]),
    "22_binary_count_plus": lambda: _binsec(_file(B22V), b"$Elements", lambda s: b"+" + s),
    "22_binary_count_-0": lambda: _binsec(_file(B22V), b"$Elements",
                                          lambda s: b"-0" + s[s.index(b"\n"):]),
    "22_binary_first_no_tags": lambda: _binsec(_file(B22V), b"$Elements",
                                               _after_count("<i", 8, 0)),
    "22_binary_first_type_2": lambda: _binsec(_file(B22V), b"$Elements",
                                              _after_count("<i", 0, 2)),
    "22_binary_node_tag_0": lambda: _binsec(_file(B22V), b"$Elements",
                                            _after_count("<i", 24, 0)),
    "22_binary_first_tag_257": lambda: _binsec(_file(B22V), b"$Nodes",
                                               _after_count("<i", 0, 257)),
    "22_binary_first_tag_0": lambda: _binsec(_file(B22V), b"$Nodes",
                                             _after_count("<i", 0, 0)),
    "fTetWild_count_2": lambda: _binsec(_file(SHARK), b"$Elements",
                                        lambda s: b"2" + s[s.index(b"\n"):]),
    "fTetWild_with_tags": lambda: _binsec(_file(SHARK), b"$Elements", _after_count("<i", 8, 1)),
    # float32 in the mesh loader
    "surf_float32_positions": lambda: _sub(_file(A22S), NODE1, b"\n1 -0.1 0.3 0.7\n"),
    "vol_float64_positions": lambda: _sub(_file(A22V), NODE1, b"\n1 -0.1 0.3 0.7\n"),
    "surf_coincident_nodes_merged": lambda: _sub(_sub(_sub(
        _file(A22S), b"$Nodes\n14\n", b"$Nodes\n15\n"), b"0 0 1\n$EndNodes",
        b"-0 0 1\n15 0 0 1\n$EndNodes"), b" 5 6 14\n", b" 5 6 15\n"),
    "vol_coincident_nodes_kept": lambda: _sub(_sub(_sub(
        _file(A22V), b"$Nodes\n14\n", b"$Nodes\n15\n"), b"0 0 1\n$EndNodes",
        b"0 0 1\n15 -0.5 -0.5 0\n$EndNodes"), b"9 10 1 2", b"9 10 15 2"),
    "surf_huge_coordinate": lambda: _sub(_file(A22S), NODE1, b"\n1 1e300 -0.5 0\n"),
    "surf_float32_max": lambda: _sub(_file(A22S), NODE1, b"\n1 3.4e38 -0.5 0\n"),
    "surf_unused_huge_node": lambda: _sub(_sub(_file(A22S), b"$Nodes\n14\n", b"$Nodes\n15\n"),
                                          b"0 0 1\n$EndNodes", b"0 0 1\n15 1e300 0 0\n$EndNodes"),
    "vol_unused_huge_node": lambda: _sub(_sub(_file(A22V), b"$Nodes\n14\n", b"$Nodes\n15\n"),
                                         b"0 0 1\n$EndNodes", b"0 0 1\n15 1e300 0 0\n$EndNodes"),
    "vol_boundary_huge_node": lambda: _sub(_file(A22V), NODE1, b"\n1 1e300 -0.5 0\n"),
    "vol_binary_boundary_nan": lambda: _binsec(_file(B22V), b"$Nodes",
                                               _after_count("<d", 4 + 28 * 3, float("nan"))),
}


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_variant_against_mujoco(name):
    _agree(VARIANTS[name]())


@pytest.mark.parametrize("name", MALFORMED_MSH)
def test_malformed_file_against_mujoco(name):
    assert not _agree(_file(name))


@pytest.mark.parametrize("name", [A22V, A41S, B22S, B41V, SHARK])
def test_truncated_files(name):
    data = _file(name)
    complete = data.index(b"$EndElements") + len(b"$EndElements")
    for n in range(0, len(data), max(1, len(data) // 40)):
        assert not _agree(data[:n]) or n >= complete


@pytest.mark.parametrize("dim", [None, 1, 2, 3])
def test_dim_attribute_against_mujoco(dim):
    for name in (A22S, A41V):
        _agree(_file(name), dim)
    assert not _agree(LINE41, dim)


def test_garbage_raises_only_mjcferror():
    rng = np.random.default_rng(0)
    heads = [b"", b"$MeshFormat", b"$MeshFormat\n2.2 1 8\n", b"$MeshFormat\n4.1 1 8\n",
             b"$MeshFormat\n2.2 0 8\n"]
    for head in heads:
        for _ in range(20):
            body = rng.integers(0, 256, rng.integers(0, 120), dtype=np.uint8).tobytes()
            data = head + b"$Nodes\n" + body + b"$EndNodes\n$Elements\n" + body[::-1] \
                + b"$EndElements\n"
            try:
                gmsh.read_gmsh(data, None)
            except MJCFError:
                pass


def test_compact():
    points = np.arange(18, dtype=float).reshape(6, 3)
    elements = np.array([[5, 1, 3], [3, 1, 5]], np.int32)
    pts, elem = gmsh.compact(points, elements)
    np.testing.assert_array_equal(pts, points[[1, 3, 5]])
    np.testing.assert_array_equal(elem, [[2, 0, 1], [1, 0, 2]])
    assert elem.dtype == np.int32
