"""PNG decoding, height-field loading and builtin meshes against MuJoCo."""

import os
import re
import struct
import zlib
from pathlib import Path

import numpy as np
import pytest

from jaxsim.mjcf import assets as assets_pass
from jaxsim.mjcf import expand
from jaxsim.mjcf import mesh as M
from jaxsim.mjcf.compile import read_compiler
from jaxsim.mjcf.context import Ctx
from jaxsim.mjcf.image import hfield_from_custom, hfield_from_png, read_png
from jaxsim.mjcf.parse import Defaults, Source, read_tree, validate

SHARED = Path(__file__).parents[1].parent / "shared"
CORPUS = SHARED / "corpus" / "mujoco"

mujoco = pytest.importorskip("mujoco")
SITE = Path(mujoco.__file__).parent

# ----------------------------------------------------------------------------
# a tiny PNG encoder (independent of the decoder under test)

_ADAM7 = ((0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4),
          (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2))
_CHANNELS = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}


def _chunk(kind: bytes, payload: bytes) -> bytes:
    crc = zlib.crc32(kind + payload) & 0xFFFFFFFF
    return struct.pack(">I", len(payload)) + kind + payload + struct.pack(">I", crc)


def _pack_row(row: np.ndarray, depth: int) -> bytes:
    """Packs one row of samples (width*channels values) into bytes, MSB first."""
    flat = [int(v) for v in row.reshape(-1)]
    if depth == 16:
        return b"".join(struct.pack(">H", v) for v in flat)
    if depth == 8:
        return bytes(flat)
    out, acc, nbits = bytearray(), 0, 0
    for v in flat:
        acc, nbits = (acc << depth) | v, nbits + depth
        if nbits == 8:
            out.append(acc)
            acc, nbits = 0, 0
    if nbits:
        out.append(acc << (8 - nbits))
    return bytes(out)


def _paeth(a, b, c):
    p = a + b - c
    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
    return a if pa <= pb and pa <= pc else (b if pb <= pc else c)


def _filter(line: bytes, prior: bytes, bpp: int, ft: int) -> bytes:
    out = bytearray([ft])
    for i, x in enumerate(line):
        a = line[i - bpp] if i >= bpp else 0
        b = prior[i]
        c = prior[i - bpp] if i >= bpp else 0
        pred = (0, a, b, (a + b) // 2, _paeth(a, b, c))[ft]
        out.append((x - pred) & 0xFF)
    return bytes(out)


def _scanlines(samples: np.ndarray, depth: int, ctype: int, row0: int) -> bytes:
    bpp = max(1, _CHANNELS[ctype] * depth // 8)
    out, prior = [], None
    for r in range(samples.shape[0]):
        line = _pack_row(samples[r], depth)
        prior = prior if prior is not None else bytes(len(line))
        out.append(_filter(line, prior, bpp, (row0 + r) % 5))  # every filter type in turn
        prior = line
    return b"".join(out)


def encode_png(samples, depth, ctype, palette=None, trns=None, interlace=False) -> bytes:
    """Writes a PNG from (h, w, channels) stored sample values."""
    samples = np.asarray(samples)
    h, w = samples.shape[:2]
    if interlace:
        data = b""
        for k, (x0, y0, dx, dy) in enumerate(_ADAM7):
            sub = samples[y0::dy, x0::dx]
            if sub.size:
                data += _scanlines(sub, depth, ctype, k)
    else:
        data = _scanlines(samples, depth, ctype, 0)
    png = b"\x89PNG\r\n\x1a\n"
    png += _chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, depth, ctype, 0, 0, int(interlace)))
    if palette is not None:
        png += _chunk(b"PLTE", np.asarray(palette, np.uint8).tobytes())
    if trns is not None:
        png += _chunk(b"tRNS", bytes(trns))
    png += _chunk(b"tEXt", b"Comment\x00ancillary chunks are skipped")
    # split the image data over two IDAT chunks to exercise concatenation
    z = zlib.compress(data)
    png += _chunk(b"IDAT", z[:len(z) // 2]) + _chunk(b"IDAT", z[len(z) // 2:])
    return png + _chunk(b"IEND", b"")


_FORMATS = [(0, d) for d in (1, 2, 4, 8, 16)] + [(2, 8), (2, 16), (4, 8), (4, 16),
                                                  (6, 8), (6, 16)] + [(3, d) for d in (1, 2, 4, 8)]


def _random_image(rng, ctype, depth, h=11, w=13):
    hi = (1 << depth) - 1
    if ctype == 3:
        hi = min(hi, 5)  # stay inside a 6-entry palette
    return rng.integers(0, hi + 1, size=(h, w, _CHANNELS[ctype])).astype(
        np.uint16 if depth == 16 else np.uint8)


_PALETTE = np.array([[10, 200, 3], [250, 0, 0], [0, 0, 255], [77, 1, 2], [128, 128, 128],
                     [5, 6, 7]], dtype=np.uint8)


@pytest.mark.parametrize("interlace", [False, True])
@pytest.mark.parametrize("ctype,depth", _FORMATS)
def test_png_roundtrip(ctype, depth, interlace):
    rng = np.random.default_rng(ctype * 100 + depth)
    for h, w in ((11, 13), (1, 1), (3, 9)):
        img = _random_image(rng, ctype, depth, h, w)
        pal = _PALETTE if ctype == 3 else None
        out = read_png(encode_png(img, depth, ctype, palette=pal, interlace=interlace))
        if ctype == 3:
            np.testing.assert_array_equal(out, _PALETTE[img[..., 0]])
        else:
            assert out.dtype == (np.uint16 if depth == 16 else np.uint8)
            np.testing.assert_array_equal(out, img)


def test_png_palette_transparency():
    img = np.array([[[0], [1]], [[2], [5]]], dtype=np.uint8)
    out = read_png(encode_png(img, 8, 3, palette=_PALETTE, trns=[0, 128]))
    assert out.shape == (2, 2, 4)
    np.testing.assert_array_equal(out[..., 3], [[0, 128], [255, 255]])


# ----------------------------------------------------------------------------
# malformed PNG files


_SIG = b"\x89PNG\r\n\x1a\n"


def _ihdr(w=4, h=3, depth=8, ctype=0, interlace=0):
    return _chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, depth, ctype, 0, 0, interlace))


def _idat(raw: bytes) -> bytes:
    return _chunk(b"IDAT", zlib.compress(raw))


_IEND = _chunk(b"IEND", b"")
_GOOD_DATA = bytes(3 * 5)  # 3 rows of filter byte + 4 grey samples


def _malformed():
    good = _SIG + _ihdr() + _idat(_GOOD_DATA) + _IEND
    assert read_png(good).shape == (3, 4, 1)
    corrupt_crc = bytearray(good)
    corrupt_crc[good.index(b"IHDR") + 6] ^= 1
    return {
        "empty": b"",
        "signature": b"\x89PNX\r\n\x1a\n" + good[8:],
        "truncated": good[:-20],
        "no_iend": good[:-len(_IEND)],
        "crc": bytes(corrupt_crc),
        "zero_width": _SIG + _ihdr(w=0) + _idat(b"") + _IEND,
        "bad_depth": _SIG + _ihdr(depth=3) + _idat(_GOOD_DATA) + _IEND,
        "rgb_depth_4": _SIG + _ihdr(depth=4, ctype=2) + _idat(bytes(3 * 7)) + _IEND,
        "bad_colour": _SIG + _ihdr(ctype=5) + _idat(_GOOD_DATA) + _IEND,
        "bad_interlace": _SIG + _ihdr(interlace=2) + _idat(_GOOD_DATA) + _IEND,
        "palette_without_plte": _SIG + _ihdr(ctype=3) + _idat(_GOOD_DATA) + _IEND,
        "short_data": _SIG + _ihdr() + _idat(_GOOD_DATA[:-1]) + _IEND,
        "long_data": _SIG + _ihdr() + _idat(_GOOD_DATA + b"\0") + _IEND,
        "filter_type": _SIG + _ihdr() + _idat(b"\x05" + _GOOD_DATA[1:]) + _IEND,
        "zlib": _SIG + _ihdr() + _chunk(b"IDAT", b"\x78\x9c garbage") + _IEND,
        "no_idat": _SIG + _ihdr() + _IEND,
        "unknown_critical": _SIG + _ihdr() + _chunk(b"ABCD", b"x") + _idat(_GOOD_DATA) + _IEND,
        "idat_first": _SIG + _idat(_GOOD_DATA) + _ihdr() + _IEND,
    }


_MALFORMED = _malformed()


@pytest.mark.parametrize("name", sorted(_MALFORMED))
def test_malformed_png_rejected(name):
    data = _MALFORMED[name]
    with pytest.raises(ValueError):
        read_png(data)
    with pytest.raises(ValueError):
        hfield_from_png(data)
    # MuJoCo (lodepng) rejects the same files
    with pytest.raises(ValueError):
        mujoco.MjModel.from_xml_string(_hfield_xml("h.png"), {"h.png": data})


@pytest.mark.parametrize("case", ["empty", "short_header", "zero_rows", "one_row",
                                  "short_data", "long_data", "png_one_column"])
def test_bad_hfield_files_rejected(case):
    fname, data = "h.bin", {
        "empty": b"",
        "short_header": b"\0" * 7,
        "zero_rows": struct.pack("<ii", 0, 3),
        "one_row": struct.pack("<ii3f", 1, 3, 0, 1, 2),  # MuJoCo 4 needs >= 2x2
        "short_data": struct.pack("<ii3f", 2, 2, 0, 1, 2),
        "long_data": struct.pack("<ii5f", 2, 2, 0, 1, 2, 3, 4),
    }.get(case, b"")
    if case == "png_one_column":
        fname, data = "h.png", encode_png(np.arange(4, dtype=np.uint8).reshape(4, 1, 1), 8, 0)
        with pytest.raises(ValueError):
            hfield_from_png(data)
    else:
        with pytest.raises(ValueError):
            hfield_from_custom(data)
    with pytest.raises(ValueError):
        mujoco.MjModel.from_xml_string(_hfield_xml(fname), {fname: data})


# ----------------------------------------------------------------------------
# height fields vs MuJoCo


def _assets_ctx(path=None, xml=None, assets=None):
    """Runs the compiler up to and including the asset pass (skips the slow rest)."""
    if path is not None:
        data = Path(path).read_bytes()
        source = Source(os.path.dirname(os.path.abspath(path)), None)
        fname = str(path)
    else:
        data, source, fname = xml.encode(), Source(None, assets), "<string>"
    root = read_tree(data, fname, source)
    validate(root, "mujoco")
    compiler = read_compiler(root)
    expand.expand_all(root, compiler, source)
    ctx = Ctx(root, source, Defaults(root), compiler)
    assets_pass.compile_assets(ctx)
    return ctx


def _assert_hfields_equal(ctx, m):
    out = ctx.out
    assert out["nhfield"] == m.nhfield
    np.testing.assert_array_equal(out["hfield_nrow"], m.hfield_nrow)
    np.testing.assert_array_equal(out["hfield_ncol"], m.hfield_ncol)
    np.testing.assert_array_equal(out["hfield_adr"], m.hfield_adr)
    np.testing.assert_array_equal(out["hfield_size"], m.hfield_size)
    assert out["hfield_data"].dtype == np.float32
    np.testing.assert_array_equal(out["hfield_data"], m.hfield_data)  # bit-exact


def _hfield_xml(fname):
    return (f'<mujoco><asset><hfield name="h" file="{fname}" size="1 1 .1 .1"/></asset>'
            '<worldbody><geom type="hfield" hfield="h"/></worldbody></mujoco>')


_HFIELD_MODELS = [
    CORPUS / "user" / "testdata" / "hfield_png.xml",
    CORPUS / "user" / "testdata" / "hfield_xml.xml",
    CORPUS / "xml" / "testdata" / "hfield_png_nonrgb.xml",
    CORPUS / "engine" / "testdata" / "collision_convex" / "frameless_contact_hfield.xml",
    CORPUS / "engine" / "testdata" / "solver" / "model.xml",
    CORPUS / "engine" / "testdata" / "collision_convex" / "perf" / "mixed.xml",
    SITE / "mjx" / "test_data" / "barkour_v0" / "assets" / "barkour_v0_mjx.xml",
]


@pytest.mark.parametrize("path", _HFIELD_MODELS, ids=lambda p: p.name)
def test_hfield_models_match_mujoco(path):
    if not path.exists():
        pytest.skip("model not available")
    _assert_hfields_equal(_assets_ctx(path), mujoco.MjModel.from_xml_path(str(path)))


@pytest.mark.parametrize("interlace", [False, True])
@pytest.mark.parametrize("ctype,depth", _FORMATS)
def test_hfield_png_formats_match_mujoco(ctype, depth, interlace):
    """lodepng's grey conversion: red channel, high byte, scaled low depths."""
    rng = np.random.default_rng(7 + ctype * 100 + depth)
    img = _random_image(rng, ctype, depth, 9, 6)
    pal = _PALETTE if ctype == 3 else None
    png = encode_png(img, depth, ctype, palette=pal, interlace=interlace)
    xml = _hfield_xml("h.png")
    m = mujoco.MjModel.from_xml_string(xml, {"h.png": png})
    _assert_hfields_equal(_assets_ctx(xml=xml, assets={"h.png": png}), m)
    elev = hfield_from_png(png)
    assert elev.shape == (9, 6) and elev.dtype == np.float32


@pytest.mark.parametrize("case", ["short_palette", "long_palette", "grey_trns", "rgb_trns",
                                  "constant"])
def test_hfield_png_edge_cases_match_mujoco(case):
    img = np.array([[[0], [1], [3]], [[2], [1], [0]]], dtype=np.uint8)
    if case == "short_palette":  # indices past the palette decode as black
        png = encode_png(img, 2, 3, palette=_PALETTE[:2])
    elif case == "long_palette":  # more entries than a 1-bit index can reach
        png = encode_png(img % 2, 1, 3, palette=_PALETTE)
    elif case == "grey_trns":
        png = encode_png(img * 60, 8, 0, trns=[0, 60])
    elif case == "rgb_trns":
        png = encode_png(np.repeat(img * 60, 3, axis=2), 8, 2, trns=bytes(6))
    else:  # all samples equal: MuJoCo leaves them at zero
        png = encode_png(np.full_like(img, 9), 8, 0)
    xml = _hfield_xml("h.png")
    m = mujoco.MjModel.from_xml_string(xml, {"h.png": png})
    _assert_hfields_equal(_assets_ctx(xml=xml, assets={"h.png": png}), m)


def test_hfield_png_rows_flipped():
    img = np.array([[[0], [10]], [[20], [30]], [[40], [50]]], dtype=np.uint8)
    np.testing.assert_array_equal(hfield_from_png(encode_png(img, 8, 0)),
                                  [[40, 50], [20, 30], [0, 10]])


def test_hfield_custom_matches_mujoco():
    rng = np.random.default_rng(3)
    vals = rng.normal(size=(5, 7)).astype(np.float32)
    data = struct.pack("<ii", 5, 7) + vals.tobytes()
    np.testing.assert_array_equal(hfield_from_custom(data), vals)  # no row flip
    for fname in ("h.bin", "h.hf"):
        xml = _hfield_xml(fname)
        m = mujoco.MjModel.from_xml_string(xml, {fname: data})
        _assert_hfields_equal(_assets_ctx(xml=xml, assets={fname: data}), m)


# ----------------------------------------------------------------------------
# builtin meshes vs MuJoCo

_MAKEMESH = CORPUS / "user" / "testdata" / "makemesh.xml"


def _spec_mesh(kind, params):
    xml = f'<mujoco><asset><mesh name="m" builtin="{kind}" params="{params}"/></asset></mujoco>'
    return mujoco.MjSpec.from_string(xml).meshes[0]


_EXTRA_BUILTINS = [("sphere", "3"), ("sphere", "4.9"), ("hemisphere", "10"),
                   ("hemisphere", "1"), ("cone", "64 0.7"), ("cone", "3.9 0"),
                   ("supersphere", "3 0 0"), ("supersphere", "17 .1 3.3"),
                   ("supertorus", "3 1 .1 5"), ("supertorus", "50 .2 .7 1.3"),
                   ("wedge", "7 5 180 90 1"), ("wedge", "8 9 33 12 .3"), ("plate", "3 4"),
                   ("plate", "5 1")]


def test_builtin_raw_matches_spec():
    """builtin_mesh reproduces MuJoCo's user vertices/faces/normals bit for bit."""
    cases = _EXTRA_BUILTINS
    if _MAKEMESH.exists():
        cases = cases + re.findall(r'builtin="(\w+)" params="([^"]*)"', _MAKEMESH.read_text())
    for kind, params in cases:
        sm = _spec_mesh(kind, params)
        raw = M.builtin_mesh(kind, params)
        vert = np.asarray(sm.uservert, np.float32).reshape(-1, 3)
        np.testing.assert_array_equal(raw.vert, vert, err_msg=f"{kind} {params}")
        face = np.asarray(sm.userface).reshape(-1, 3)
        np.testing.assert_array_equal(raw.face if raw.face is not None else np.zeros((0, 3)),
                                      face, err_msg=f"{kind} {params}")
        normal = np.asarray(sm.usernormal, np.float32).reshape(-1, 3)
        np.testing.assert_array_equal(raw.normal if raw.normal is not None
                                      else np.zeros((0, 3)), normal)


@pytest.mark.skipif(not _MAKEMESH.exists(), reason="shared corpus not available")
def test_makemesh_matches_mujoco():
    ctx = _assets_ctx(_MAKEMESH)
    m = mujoco.MjModel.from_xml_path(str(_MAKEMESH))
    assert len(ctx.meshes) == m.nmesh
    for i, mesh in enumerate(ctx.meshes):
        va, vn = m.mesh_vertadr[i], m.mesh_vertnum[i]
        fa, fn = m.mesh_faceadr[i], m.mesh_facenum[i]
        np.testing.assert_array_equal(mesh.vert, m.mesh_vert[va:va + vn], err_msg=m.mesh(i).name)
        np.testing.assert_array_equal(mesh.face, m.mesh_face[fa:fa + fn], err_msg=m.mesh(i).name)


@pytest.mark.parametrize("kind,params", [
    ("sphere", ""), ("sphere", "abc"), ("sphere", "1 2"), ("sphere", "5"), ("sphere", "-1"),
    ("sphere", "1e400"), ("sphere", "inf"), ("hemisphere", "11"), ("cone", "3"),
    ("cone", "2 1"), ("cone", "3 1.5"), ("cone", "3 -1"), ("supersphere", "2 1 1"),
    ("supersphere", "3 -1 1"), ("supersphere", "3 1 -1"), ("supertorus", "2 .5 1 1"),
    ("supertorus", "3 0 1 1"), ("supertorus", "3 .5 0 1"), ("supertorus", "3 .5 1 0"),
    ("wedge", "3 3 0 45 0"), ("wedge", "3 3 45 91 0"), ("wedge", "0 3 45 45 0"),
    ("wedge", "3 3 45 45 2"), ("wedge", "3 3 45 45"), ("plate", "0 3"), ("plate", "3"),
])
def test_builtin_bad_params_match_mujoco(kind, params):
    with pytest.raises(ValueError) as theirs:
        _spec_mesh(kind, params)
    with pytest.raises(M.MeshError) as ours:
        M.builtin_mesh(kind, params)
    # MuJoCo's message wraps ours ("XML Error: Error: <message>")
    assert str(ours.value) in str(theirs.value)
