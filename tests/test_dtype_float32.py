"""A float32 model stays in float32 under JAX_ENABLE_X64.

With x64 enabled, a numpy float64 constant (numpy arrays are not weakly typed) or an integer
mixed with a python float pulls float32 values up to float64: the step then runs partly in
float64 (slower float32 rollouts) and can hand back float64 state leaves. For a few small
models that together reach box-box, capsule-box, sphere-box, height-field and convex-mesh
collisions, pyramidal and elliptic cones, the PGS / CG / Newton solvers, tendons and
sensors, the jaxprs of `step` and `inverse` (traced only, nothing is compiled) must hold no
conversion of a non-float64 value to float64 / complex128 (ints and bools included), and
the returned State must be float32 throughout. Weakly typed python scalars are fine: they
take the dtype of the arrays they meet.
"""

from __future__ import annotations

import os
import pathlib
import sys

os.environ.setdefault("JAX_ENABLE_X64", "1")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))

from conftest import CORPUS, mjx_test_data  # noqa: E402

import jaxsim  # noqa: E402
from jaxsim.mjcf.compile import load_string  # noqa: E402

jax.config.update("jax_enable_x64", True)

_WIDE = (np.dtype(np.float64), np.dtype(np.complex128))
_FLOAT32 = np.dtype(np.float32)
_MJX = mjx_test_data()


def _case(base, rel, option="", fns=("step", "inverse")):
    path = None if base is None else pathlib.Path(base) / rel
    marks = pytest.mark.skipif(path is None or not path.exists(), reason=f"no {rel}")
    return pytest.param(path, option, fns, marks=marks,
                        id=rel.split("/")[-1][:-4] + (f"[{option}]" if option else ""))


CASES = [
    # box-box, sphere-box, box / sphere-plane (condim 6), elliptic cones, PGS, contact sensors
    _case(CORPUS, "engine/testdata/sensor/contact_net.xml", 'cone="elliptic" solver="PGS"'),
    # capsule-box, pyramidal cones, CG, tendons, 75 sensors of most kinds
    _case(_MJX, "sensor/sensor.xml", 'solver="CG"'),
    # height field : box, convex mesh : capsule (CCD), with Newton; the slowest to trace, and
    # inverse runs the same collision code as step, so step alone
    _case(CORPUS, "engine/testdata/collision_convex/frameless_contact_hfield.xml", fns=("step",)),
    _case(CORPUS, "engine/testdata/collision_convex/capsule_mesh.xml", fns=("step",)),
]


def _load(path: pathlib.Path, option: str):
    if not option:
        return jaxsim.load(path)
    text = path.read_text()
    head = text.index(">", text.index("<mujoco")) + 1
    return load_string(text[:head] + f"<option {option}/>" + text[head:],
                       model_dir=str(path.parent))


def _subjaxprs(eqn):
    for p in eqn.params.values():
        for q in p if isinstance(p, (list, tuple)) else (p,):
            if hasattr(q, "eqns"):
                yield q
            elif hasattr(getattr(q, "jaxpr", None), "eqns"):
                yield q.jaxpr


def _where(eqn) -> str:
    tb = getattr(eqn.source_info, "traceback", None)
    frames = [f for f in (tb.frames if tb else ()) if f"{os.sep}jaxsim{os.sep}" in f.file_name]
    return " <- ".join(f"{f.file_name.rsplit('jaxsim' + os.sep, 1)[-1]}:{f.line_num}"
                       for f in frames[:3]) or "?"


def _widening(jaxpr, out: list):
    """Every conversion of a non-float64 value to float64 / complex128, recursively."""
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "convert_element_type":
            src, dst = eqn.invars[0].aval.dtype, eqn.outvars[0].aval.dtype
            if dst in _WIDE and src not in _WIDE:
                out.append(f"{src}->{dst} at {_where(eqn)}")
        for sub in _subjaxprs(eqn):
            _widening(sub, out)
    return out


def _not_float32(tree) -> list[str]:
    return [f"{jax.tree_util.keystr(k)}: {v.dtype}"
            for k, v in jax.tree_util.tree_leaves_with_path(tree)
            if hasattr(v, "dtype") and np.issubdtype(v.dtype, np.inexact) and v.dtype != _FLOAT32]


@pytest.mark.parametrize("path, option, fns", CASES)
def test_float32_model_stays_float32(path, option, fns):
    m = _load(path, option)
    d = jaxsim.make_state(m)
    assert not _not_float32(m), _not_float32(m)[:10]
    assert not _not_float32(d), _not_float32(d)[:10]
    for name in fns:
        closed, shape = jax.make_jaxpr(getattr(jaxsim, name), return_shape=True)(m, d)
        wide = sorted(set(_widening(closed.jaxpr, [])))
        assert not wide, f"{name}: float64 inside a float32 model:\n" + "\n".join(wide)
        bad = _not_float32(shape)
        assert not bad, f"{name}: non-float32 State leaves: {bad[:10]}"


def test_float32_line_search_stops_on_stagnation():
    """With tolerances below float32's resolution MuJoCo's line search would run to
    ls_iterations and its iterations to the bound; in float32 both stop on stagnation (a
    Newton step that no longer moves alpha, a bracket a few ulps wide, a step that no
    longer moves qacc), with the same answer as float64."""
    import importlib

    from jaxsim import constraint, solver

    forward = importlib.import_module("jaxsim.forward")  # the module, not jaxsim.forward()

    xml = """
    <mujoco><option tolerance="1e-30" ls_tolerance="1e-30" ls_iterations="50"/>
      <worldbody><geom type="plane" size="5 5 .1"/>
        <body pos="0 0 .099" euler="3 4 0"><freejoint/><geom type="box" size=".1 .2 .1"/></body>
        <body pos=".5 0 .09"><freejoint/><geom type="sphere" size=".1" condim="6"/></body>
      </worldbody></mujoco>"""

    def run(dtype):
        m = jaxsim.load_string(xml, dtype=dtype)
        d = jaxsim.make_state(m)
        d = d.replace(qvel=d.qvel.at[0].set(0.3).at[6].set(-0.2))

        def f(d):
            d = forward.fwd_acceleration(m, forward.fwd_actuation(
                m, forward.fwd_velocity(m, forward.fwd_position(m, d))))
            return solver.solve(m, d, constraint.make_constraint(m, d))

        # as users compile it (the suite lowers XLA's backend optimisation, see conftest;
        # at level 0 one island's search here runs to ls_iterations: the stagnation
        # tests are sensitive to how float32 rounds)
        return jax.jit(f, compiler_options={"xla_backend_optimization_level": 2})(d)

    qacc32, _, _, info32 = run(jnp.float32)
    with jax.enable_x64(True):
        qacc64, _, _, info64 = run(jnp.float64)
    n = int(info32.niter)
    assert 1 <= n < 30  # the iterations stop too (the bound is 100)
    assert int(np.max(np.asarray(info32.neval)[:n])) < 20
    np.testing.assert_allclose(np.asarray(qacc32), np.asarray(qacc64), rtol=1e-3, atol=1e-3)
