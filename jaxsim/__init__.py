"""jaxsim: MuJoCo's physics as a functional, differentiable, vectorised simulator in JAX."""

from jaxsim.collision.distance import geom_distance
from jaxsim.forward import forward, step, step1, step2
from jaxsim.history import init_ctrl_history, init_sensor_history, read_ctrl, read_sensor
from jaxsim.inverse import inverse
from jaxsim.mjcf.compile import load, load_string
from jaxsim.mjcf.errors import MJCFError
from jaxsim.raycast import ray
from jaxsim.rollout import compiler_options, rollout, rollout_batch
from jaxsim.state import make_state
from jaxsim.types import (
    BiasType,
    Cone,
    Contact,
    DisableBit,
    DynType,
    EnableBit,
    GainType,
    GeomType,
    Integrator,
    JointType,
    Model,
    ObjType,
    Option,
    SensorType,
    Solver,
    State,
    TrnType,
)
from jaxsim.util import (
    StateBit,
    contact_force,
    differentiate_pos,
    get_state,
    integrate_pos,
    jac,
    jac_body,
    jac_body_com,
    jac_dot,
    jac_geom,
    jac_point_axis,
    jac_site,
    jac_subtree_com,
    object_acceleration,
    object_velocity,
    reset,
    set_state,
    state_size,
    transition_jacobians,
)


def set_const(model):
    """Recomputes the constants derived from masses, inertias and geometry (mj_setConst)."""
    from jaxsim.constants import set_const as _set_const

    return _set_const(model)


__all__ = [
    "BiasType", "Cone", "Contact", "DisableBit", "DynType", "EnableBit", "GainType", "GeomType",
    "Integrator", "JointType", "MJCFError", "Model", "ObjType", "Option", "SensorType", "Solver",
    "State", "TrnType", "compiler_options", "forward", "inverse", "load", "load_string",
    "make_state", "rollout", "rollout_batch", "set_const", "step", "step1", "step2",
    # state utilities (jaxsim.util)
    "StateBit", "contact_force", "differentiate_pos", "get_state", "integrate_pos", "jac",
    "jac_body", "jac_body_com", "jac_dot", "jac_geom", "jac_point_axis", "jac_site",
    "jac_subtree_com", "object_acceleration", "object_velocity", "reset", "set_state",
    "state_size", "transition_jacobians",
    # history buffers (jaxsim.history)
    "init_ctrl_history", "init_sensor_history", "read_ctrl", "read_sensor",
    # queries
    "geom_distance", "ray",
]
__version__ = "0.1.0"
