"""The pytree contract: leaves vs static structure, field documentation, enums, retracing."""

import dataclasses

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest
from conftest import MODELS

import jaxsim
from jaxsim import types
from jaxsim.struct import Struct

STRUCTS = (types.Option, types.Model, types.State, types.Contact)


@pytest.fixture(scope="module")
def biped():
    return jaxsim.load(MODELS / "biped.xml", dtype=jnp.float64)


@pytest.mark.parametrize("cls", STRUCTS)
def test_every_field_documented_with_shape(cls):
    for f in dataclasses.fields(cls):
        meta = f.metadata
        assert "static" in meta, f"{cls.__name__}.{f.name} not declared with leaf()/static()"
        assert meta.get("doc", "").strip(), f"{cls.__name__}.{f.name} has no description"
        shape = meta.get("shape", "")
        assert shape == "-" or (shape.startswith("(") and shape.endswith(")")), (
            f"{cls.__name__}.{f.name} shape {shape!r}")


def _check_struct(obj, dtype):
    for name, meta in type(obj).field_info().items():
        v = getattr(obj, name)
        if meta["static"]:
            assert isinstance(v, (int, str, tuple, np.ndarray)), (name, type(v))
            if isinstance(v, np.ndarray):
                assert not np.issubdtype(v.dtype, np.floating), f"static {name} is real-valued"
                assert not v.flags.writeable, f"static {name} is mutable"
        elif isinstance(v, Struct):
            _check_struct(v, dtype)
        else:
            assert isinstance(v, jax.Array), (name, type(v))
            assert not v.weak_type, f"{name} is weakly typed"
            if jnp.issubdtype(v.dtype, jnp.floating):
                assert v.dtype == dtype, (name, v.dtype)


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.float64])
def test_leaves_are_arrays_and_structure_is_static(dtype):
    m = jaxsim.load(MODELS / "arm_tendon.xml", dtype=dtype)
    _check_struct(m, dtype)
    _check_struct(jaxsim.make_state(m), dtype)
    leaves = jax.tree_util.tree_leaves(m)
    assert all(isinstance(x, jax.Array) for x in leaves)


def test_real_parameters_are_leaves(biped):
    names = {str(p[-1].name) for p, _ in jax.tree_util.tree_leaves_with_path(biped)}
    for name in ("body_mass", "body_inertia", "geom_friction", "dof_damping", "jnt_stiffness",
                 "actuator_gainprm", "geom_solref", "timestep", "gravity"):
        assert name in names, name


def test_replace_keeps_structure_and_jit_does_not_retrace(biped):
    traces = []

    @jax.jit
    def total_mass(m):
        traces.append(1)
        return jnp.sum(m.body_mass) * m.opt.timestep

    a = total_mass(biped)
    b = total_mass(biped.replace(body_mass=biped.body_mass * 2))
    c = total_mass(biped.replace(opt=biped.opt.replace(timestep=biped.opt.timestep * 3)))
    assert len(traces) == 1
    np.testing.assert_allclose(b, 2 * a)
    np.testing.assert_allclose(c, 3 * a)
    # a structural change is a different pytree structure: it must retrace
    total_mass(biped.replace(opt=biped.opt.replace(iterations=7)))
    assert len(traces) == 2


def test_vmap_over_model_parameters(biped):
    masses = jnp.stack([biped.body_mass * s for s in (1.0, 2.0, 3.0)])
    out = jax.vmap(lambda mass: jnp.sum(biped.replace(body_mass=mass).body_mass))(masses)
    np.testing.assert_allclose(out, jnp.sum(biped.body_mass) * jnp.array([1.0, 2.0, 3.0]))


def test_replace_rejects_unknown_fields(biped):
    with pytest.raises(AttributeError):
        biped.replace(not_a_field=1)


ENUMS = [
    (types.JointType, mujoco.mjtJoint, "mjJNT_"),
    (types.GeomType, mujoco.mjtGeom, "mjGEOM_"),
    (types.Integrator, mujoco.mjtIntegrator, "mjINT_"),
    (types.Cone, mujoco.mjtCone, "mjCONE_"),
    (types.Solver, mujoco.mjtSolver, "mjSOL_"),
    (types.EqType, mujoco.mjtEq, "mjEQ_"),
    (types.WrapType, mujoco.mjtWrap, "mjWRAP_"),
    (types.TrnType, mujoco.mjtTrn, "mjTRN_"),
    (types.DynType, mujoco.mjtDyn, "mjDYN_"),
    (types.GainType, mujoco.mjtGain, "mjGAIN_"),
    (types.BiasType, mujoco.mjtBias, "mjBIAS_"),
    (types.ObjType, mujoco.mjtObj, "mjOBJ_"),
    (types.SensorType, mujoco.mjtSensor, "mjSENS_"),
    (types.DisableBit, mujoco.mjtDisableBit, "mjDSBL_"),
    (types.EnableBit, mujoco.mjtEnableBit, "mjENBL_"),
    (types.ConstraintType, mujoco.mjtConstraint, "mjCNSTR_"),
    (types.ConstraintState, mujoco.mjtConstraintState, "mjCNSTRSTATE_"),
    (types.SameFrame, mujoco.mjtSameFrame, "mjSAMEFRAME_"),
    (types.StateBit, mujoco.mjtState, "mjSTATE_"),
    (types.Warning, mujoco.mjtWarning, "mjWARN_"),
]


@pytest.mark.parametrize("ours,theirs,prefix", ENUMS, ids=[e[0].__name__ for e in ENUMS])
def test_enum_values_equal_mujoco(ours, theirs, prefix):
    for member in ours:
        ref = getattr(theirs, prefix + member.name)
        assert int(member) == int(ref), (member, ref)


def test_model_field_layouts_match_mujoco(biped):
    m = mujoco.MjModel.from_xml_path(str(MODELS / "biped.xml"))
    compared = 0
    for name in types.Model.field_info():
        if name in ("opt", "names", "text_data") or not hasattr(m, name):
            continue
        ours, ref = np.asarray(getattr(biped, name)), np.asarray(getattr(m, name))
        assert ours.size == ref.size, name
        compared += 1
    assert compared > 150
