"""Option, Model, State and Contact: immutable pytrees with MuJoCo's names and layouts.

Real-valued parameters are `jax.Array` leaves (differentiable, batchable); integer
structure is static numpy (see `jaxsim.struct`). Shapes use MuJoCo's size names.
Enum values equal MuJoCo's `mjt*` enums.
"""

from __future__ import annotations

import jax
import numpy as np

from jaxsim.enums import (  # noqa: F401 -- re-exported: jaxsim.types is where users look
    BiasType,
    CamLight,
    Cone,
    ConstraintState,
    ConstraintType,
    CtrlChart,
    CtrlInput,
    DataType,
    DisableBit,
    DynType,
    EnableBit,
    EqType,
    GainType,
    GeomType,
    Integrator,
    Jacobian,
    JointType,
    ObjType,
    SameFrame,
    SensorType,
    SleepPolicy,
    SleepState,
    Solver,
    Stage,
    StateBit,
    TendonType,
    TrnType,
    Warning,
    WrapType,
)
from jaxsim.struct import Struct, leaf, static

# ----------------------------------------------------------------------------------- option

Array = jax.Array


class Option(Struct):
    """Physics options (mjOption). Real values are leaves; discrete choices are static."""

    timestep: Array = leaf("()", "simulation time step (s)")
    impratio: Array = leaf("()", "ratio of frictional to normal constraint impedance")
    tolerance: Array = leaf("()", "main solver tolerance")
    ls_tolerance: Array = leaf("()", "CG/Newton line-search tolerance")
    noslip_tolerance: Array = leaf("()", "noslip solver tolerance")
    ccd_tolerance: Array = leaf("()", "convex collision tolerance")
    sleep_tolerance: Array = leaf("()", "velocity below which a tree may sleep")
    gravity: Array = leaf("(3,)", "gravitational acceleration")
    wind: Array = leaf("(3,)", "wind velocity for fluid forces")
    magnetic: Array = leaf("(3,)", "global magnetic flux")
    density: Array = leaf("()", "density of the medium")
    viscosity: Array = leaf("()", "viscosity of the medium")
    o_margin: Array = leaf("()", "contact margin used when the override flag is enabled")
    o_solref: Array = leaf("(2,)", "solref used when the override flag is enabled")
    o_solimp: Array = leaf("(5,)", "solimp used when the override flag is enabled")
    o_friction: Array = leaf("(5,)", "friction used when the override flag is enabled")
    integrator: int = static("()", "integrator (Integrator enum)")
    cone: int = static("()", "friction cone type (Cone enum)")
    jacobian: int = static("()", "constraint Jacobian storage (Jacobian enum)")
    solver: int = static("()", "constraint solver (Solver enum)")
    iterations: int = static("()", "maximum number of main solver iterations")
    ls_iterations: int = static("()", "maximum number of line-search iterations")
    noslip_iterations: int = static("()", "maximum number of noslip iterations")
    ccd_iterations: int = static("()", "maximum number of convex collision iterations")
    disableflags: int = static("()", "bit flags disabling default features (DisableBit)")
    enableflags: int = static("()", "bit flags enabling optional features (EnableBit)")
    disableactuator: int = static("()", "bit flags disabling actuator groups")
    sdf_initpoints: int = static("()", "number of starting points for SDF collisions")
    sdf_iterations: int = static("()", "number of iterations for SDF collisions")


# ------------------------------------------------------------------------------------ model

_SIZES = (
    "nq nv nu nactuator nout na nbody njnt ngeom nsite ncam nlight nmesh nmeshvert nmeshface "
    "nmeshgraph npoly npolyvert nhfield nhfielddata nmat npair nexclude neq ntendon nwrap nsensor "
    "nsensordata nnumeric nnumericdata ntext ntextdata ntuple ntupledata nkey nmocap "
    "nuser_body nuser_jnt nuser_geom nuser_site nuser_cam nuser_tendon nuser_actuator "
    "nuser_sensor ntree nM nhistory nuserdata ngravcomp nconmax njmax "
    "nflex nflexvert nflexedge nflexelem nplastic"
).split()


class Model(Struct):
    """A compiled model (mjModel). Counts are Python ints; see `Model.sizes()`."""

    # sizes
    nq: int = static("()", "number of generalized coordinates")
    nv: int = static("()", "number of degrees of freedom")
    nu: int = static("()", "number of controls")
    nactuator: int = static("()", "number of actuators")
    nout: int = static("()", "number of actuator outputs (rows of actuator_moment)")
    na: int = static("()", "number of activation states")
    nbody: int = static("()", "number of bodies, world included")
    njnt: int = static("()", "number of joints")
    ngeom: int = static("()", "number of geoms")
    nsite: int = static("()", "number of sites")
    ncam: int = static("()", "number of cameras")
    nlight: int = static("()", "number of lights")
    nmesh: int = static("()", "number of meshes")
    nmeshvert: int = static("()", "number of vertices in all meshes")
    nmeshface: int = static("()", "number of triangles in all meshes")
    nmeshgraph: int = static("()", "number of ints in all convex-hull graphs")
    npoly: int = static("()", "number of polygons in all mesh hulls")
    npolyvert: int = static("()", "number of vertex ids in all mesh polygons")
    nhfield: int = static("()", "number of height fields")
    nhfielddata: int = static("()", "number of samples in all height fields")
    nmat: int = static("()", "number of materials")
    npair: int = static("()", "number of explicit contact pairs")
    nexclude: int = static("()", "number of excluded body pairs")
    neq: int = static("()", "number of equality constraints")
    ntendon: int = static("()", "number of tendons")
    nwrap: int = static("()", "number of wrap objects in all tendon paths")
    nsensor: int = static("()", "number of sensors")
    nsensordata: int = static("()", "number of values in sensordata")
    nnumeric: int = static("()", "number of numeric custom fields")
    nnumericdata: int = static("()", "number of values in all numeric fields")
    ntext: int = static("()", "number of text custom fields")
    ntextdata: int = static("()", "number of characters in all text fields")
    ntuple: int = static("()", "number of tuple custom fields")
    ntupledata: int = static("()", "number of objects in all tuple fields")
    nkey: int = static("()", "number of keyframes")
    nmocap: int = static("()", "number of mocap bodies")
    nuser_body: int = static("()", "number of user values per body")
    nuser_jnt: int = static("()", "number of user values per joint")
    nuser_geom: int = static("()", "number of user values per geom")
    nuser_site: int = static("()", "number of user values per site")
    nuser_cam: int = static("()", "number of user values per camera")
    nuser_tendon: int = static("()", "number of user values per tendon")
    nuser_actuator: int = static("()", "number of user values per actuator")
    nuser_sensor: int = static("()", "number of user values per sensor")
    ntree: int = static("()", "number of kinematic trees under the world")
    nM: int = static("()", "number of non-zeros in the sparse inertia matrix")
    nhistory: int = static("()", "size of the actuator/sensor history buffer")
    nuserdata: int = static("()", "size of the user data array in the state")
    ngravcomp: int = static("()", "number of bodies with nonzero gravity compensation")
    nconmax: int = static("()", "contact buffer cap from <size> (-1: automatic)")
    njmax: int = static("()", "constraint row cap from <size> (-1: automatic)")
    ncompact: int = static("()", "contact slots of the compact constraint problem: -1 automatic, 0 "
                           "off (a jaxsim performance option, see forward.fwd_constraint)")
    hfield_nslot: tuple = static("(ngeom,)", "contact slots of each geom's pairs with height fields: "
                                 "mjMAXCONPAIR (50), fewer for a geom that cannot cover the "
                                 "cells for as many (set by the compiler, see "
                                 "collision.hfield.slots; more contacts set state.overflow)")
    nflex: int = static("()", "number of flex objects")
    nflexvert: int = static("()", "number of vertices in all flexes")
    nflexedge: int = static("()", "number of edges in all flexes")
    nflexelem: int = static("()", "number of elements in all flexes")
    nplastic: int = static("()", "number of plastic state values (springyield springs)")

    opt: Option = leaf("-", "physics options")

    # default generalized coordinates
    qpos0: Array = leaf("(nq,)", "qpos at the reference configuration")
    qpos_spring: Array = leaf("(nq,)", "qpos at which joint springs are at rest")

    # bodies
    body_parentid: np.ndarray = static("(nbody,)", "id of the parent body")
    body_rootid: np.ndarray = static("(nbody,)", "id of the root of the body's tree (child of world)")
    body_weldid: np.ndarray = static("(nbody,)", "id of the body this body is welded to")
    body_mocapid: np.ndarray = static("(nbody,)", "mocap id of the body, -1 if not mocap")
    body_jntnum: np.ndarray = static("(nbody,)", "number of joints of the body")
    body_jntadr: np.ndarray = static("(nbody,)", "first joint id of the body, -1 if none")
    body_dofnum: np.ndarray = static("(nbody,)", "number of dofs of the body")
    body_dofadr: np.ndarray = static("(nbody,)", "first dof id of the body, -1 if none")
    body_treeid: np.ndarray = static("(nbody,)", "id of the body's kinematic tree, -1 for static")
    body_geomnum: np.ndarray = static("(nbody,)", "number of geoms of the body")
    body_geomadr: np.ndarray = static("(nbody,)", "first geom id of the body, -1 if none")
    body_simple: np.ndarray = static("(nbody,)", "1: diagonal inertia and sliders on axes, 2: also no rotation")
    body_sameframe: np.ndarray = static("(nbody,)", "inertial frame alignment with body frame (SameFrame)")
    body_contype: np.ndarray = static("(nbody,)", "OR of the contype of the body's geoms")
    body_conaffinity: np.ndarray = static("(nbody,)", "OR of the conaffinity of the body's geoms")
    body_pos: Array = leaf("(nbody, 3)", "position offset relative to the parent body")
    body_quat: Array = leaf("(nbody, 4)", "orientation offset relative to the parent body (w,x,y,z)")
    body_ipos: Array = leaf("(nbody, 3)", "inertial frame position in the body frame")
    body_iquat: Array = leaf("(nbody, 4)", "inertial frame orientation in the body frame")
    body_mass: Array = leaf("(nbody,)", "mass")
    body_subtreemass: Array = leaf("(nbody,)", "mass of the subtree starting at this body")
    body_inertia: Array = leaf("(nbody, 3)", "principal moments of inertia")
    body_invweight0: Array = leaf("(nbody, 2)", "mean inverse inertia at qpos0 (translation, rotation)")
    body_gravcomp: Array = leaf("(nbody,)", "fraction of gravity compensated by antigravity force")
    body_margin: Array = leaf("(nbody,)", "maximum geom margin of the body")
    body_user: Array = leaf("(nbody, nuser_body)", "user data")

    # joints
    jnt_type: np.ndarray = static("(njnt,)", "joint type (JointType)")
    jnt_qposadr: np.ndarray = static("(njnt,)", "start address in qpos")
    jnt_dofadr: np.ndarray = static("(njnt,)", "start address in qvel")
    jnt_bodyid: np.ndarray = static("(njnt,)", "id of the joint's body")
    jnt_group: np.ndarray = static("(njnt,)", "group for visibility")
    jnt_limited: np.ndarray = static("(njnt,)", "whether the joint has limits")
    jnt_actfrclimited: np.ndarray = static("(njnt,)", "whether actuator force on the joint is clamped")
    jnt_actgravcomp: np.ndarray = static("(njnt,)", "whether gravcomp is applied through actuators")
    jnt_solref: Array = leaf("(njnt, 2)", "solref of the joint limit")
    jnt_solimp: Array = leaf("(njnt, 5)", "solimp of the joint limit")
    jnt_pos: Array = leaf("(njnt, 3)", "anchor position in the body frame")
    jnt_axis: Array = leaf("(njnt, 3)", "joint axis in the body frame")
    jnt_stiffness: Array = leaf("(njnt,)", "linear spring stiffness")
    jnt_springyield: Array = leaf("(njnt,)", "elastic yield of the spring (0: purely elastic)")
    jnt_plasticadr: np.ndarray = static("(njnt,)", "address of the spring's plastic reference, -1 if none")
    jnt_stiffnesspoly: Array = leaf("(njnt, 2)", "second and third order spring stiffness")
    jnt_range: Array = leaf("(njnt, 2)", "joint limits")
    jnt_actfrcrange: Array = leaf("(njnt, 2)", "range of total actuator force on the joint")
    jnt_margin: Array = leaf("(njnt,)", "minimum distance for limit detection")
    jnt_user: Array = leaf("(njnt, nuser_jnt)", "user data")

    # dofs
    dof_bodyid: np.ndarray = static("(nv,)", "id of the dof's body")
    dof_jntid: np.ndarray = static("(nv,)", "id of the dof's joint")
    dof_parentid: np.ndarray = static("(nv,)", "id of the parent dof, -1 at a tree root")
    dof_treeid: np.ndarray = static("(nv,)", "id of the dof's kinematic tree")
    dof_Madr: np.ndarray = static("(nv,)", "address of the dof's diagonal in the sparse inertia")
    dof_simplenum: np.ndarray = static("(nv,)", "number of consecutive simple dofs")
    dof_solref: Array = leaf("(nv, 2)", "solref of dof friction loss")
    dof_solimp: Array = leaf("(nv, 5)", "solimp of dof friction loss")
    dof_frictionloss: Array = leaf("(nv,)", "dry friction loss")
    dof_hasfrictionloss: np.ndarray = static(
        "(nv,)", "has a friction-loss row (frictionloss != 0 when compiled; fixes the rows)")
    dof_armature: Array = leaf("(nv,)", "armature inertia (added to the inertia diagonal)")
    dof_damping: Array = leaf("(nv,)", "linear damping coefficient")
    dof_dampingpoly: Array = leaf("(nv, 2)", "second and third order damping coefficients")
    dof_invweight0: Array = leaf("(nv,)", "diagonal of the inverse inertia at qpos0")
    dof_M0: Array = leaf("(nv,)", "diagonal of the inertia matrix at qpos0")
    dof_length: Array = leaf("(nv,)", "dof length scale: 1 for translation, body size for rotation")

    # trees
    tree_bodyadr: np.ndarray = static("(ntree,)", "first body id of each tree")
    tree_bodynum: np.ndarray = static("(ntree,)", "number of bodies of each tree")
    tree_dofadr: np.ndarray = static("(ntree,)", "first dof of each tree")
    tree_dofnum: np.ndarray = static("(ntree,)", "number of dofs of each tree")
    tree_sleep_policy: np.ndarray = static("(ntree,)", "sleep policy of each tree (SleepPolicy)")

    # geoms
    geom_type: np.ndarray = static("(ngeom,)", "geometric type (GeomType)")
    geom_contype: np.ndarray = static("(ngeom,)", "contact type bits")
    geom_conaffinity: np.ndarray = static("(ngeom,)", "contact affinity bits")
    geom_condim: np.ndarray = static("(ngeom,)", "contact dimensionality (1, 3, 4 or 6)")
    geom_bodyid: np.ndarray = static("(ngeom,)", "id of the geom's body")
    geom_dataid: np.ndarray = static("(ngeom,)", "id of the mesh or hfield, -1 if none")
    geom_matid: np.ndarray = static("(ngeom,)", "material id, -1 if none")
    geom_group: np.ndarray = static("(ngeom,)", "group for visibility")
    geom_priority: np.ndarray = static("(ngeom,)", "priority for contact parameter selection")
    geom_sameframe: np.ndarray = static("(ngeom,)", "frame alignment with the body (SameFrame)")
    geom_solmix: Array = leaf("(ngeom,)", "mixing weight of solref/solimp between two geoms")
    geom_solref: Array = leaf("(ngeom, 2)", "constraint solver reference: contact")
    geom_solimp: Array = leaf("(ngeom, 5)", "constraint solver impedance: contact")
    geom_size: Array = leaf("(ngeom, 3)", "type-specific size parameters")
    geom_aabb: Array = leaf("(ngeom, 6)", "local bounding box (center, half size)")
    geom_rbound: Array = leaf("(ngeom,)", "radius of the bounding sphere about the geom frame")
    geom_pos: Array = leaf("(ngeom, 3)", "position offset in the body frame")
    geom_quat: Array = leaf("(ngeom, 4)", "orientation offset in the body frame")
    geom_friction: Array = leaf("(ngeom, 3)", "friction: sliding, torsional, rolling")
    geom_margin: Array = leaf("(ngeom,)", "distance at which contacts become active")
    geom_gap: Array = leaf("(ngeom,)", "margin minus gap is the distance contacts are included")
    geom_fluid: Array = leaf("(ngeom, 12)", "ellipsoid fluid-model parameters")
    geom_surfacevel: Array = leaf("(ngeom, 6)", "surface velocity (conveyors, turntables)")
    geom_adhesion: Array = leaf("(ngeom,)", "adhesion force scale of body-transmission actuators")
    geom_user: Array = leaf("(ngeom, nuser_geom)", "user data")
    geom_rgba: Array = leaf("(ngeom, 4)", "color (visual only)")

    # sites
    site_type: np.ndarray = static("(nsite,)", "geometric type for rendering (GeomType)")
    site_bodyid: np.ndarray = static("(nsite,)", "id of the site's body")
    site_group: np.ndarray = static("(nsite,)", "group for visibility")
    site_sameframe: np.ndarray = static("(nsite,)", "frame alignment with the body (SameFrame)")
    site_size: Array = leaf("(nsite, 3)", "geom size for rendering and insidesite sensors")
    site_pos: Array = leaf("(nsite, 3)", "position offset in the body frame")
    site_quat: Array = leaf("(nsite, 4)", "orientation offset in the body frame")
    site_user: Array = leaf("(nsite, nuser_site)", "user data")

    # cameras
    cam_mode: np.ndarray = static("(ncam,)", "tracking mode (CamLight)")
    cam_bodyid: np.ndarray = static("(ncam,)", "id of the camera's body")
    cam_targetbodyid: np.ndarray = static("(ncam,)", "id of the target body, -1 if none")
    cam_projection: np.ndarray = static("(ncam,)", "0: perspective, 1: orthographic")
    cam_resolution: np.ndarray = static("(ncam, 2)", "resolution in pixels (width, height)")
    cam_pos: Array = leaf("(ncam, 3)", "position offset in the body frame")
    cam_quat: Array = leaf("(ncam, 4)", "orientation offset in the body frame")
    cam_poscom0: Array = leaf("(ncam, 3)", "global position relative to the subtree com at qpos0")
    cam_pos0: Array = leaf("(ncam, 3)", "global position relative to the body at qpos0")
    cam_mat0: Array = leaf("(ncam, 9)", "global orientation at qpos0")
    cam_fovy: Array = leaf("(ncam,)", "vertical field of view (degrees)")
    cam_ipd: Array = leaf("(ncam,)", "inter-pupillary distance")
    cam_sensorsize: Array = leaf("(ncam, 2)", "sensor size (length units)")
    cam_intrinsic: Array = leaf("(ncam, 4)", "focal length and principal point")
    cam_user: Array = leaf("(ncam, nuser_cam)", "user data")

    # lights
    light_mode: np.ndarray = static("(nlight,)", "tracking mode (CamLight)")
    light_bodyid: np.ndarray = static("(nlight,)", "id of the light's body")
    light_targetbodyid: np.ndarray = static("(nlight,)", "id of the target body, -1 if none")
    light_type: np.ndarray = static("(nlight,)", "light type")
    light_castshadow: np.ndarray = static("(nlight,)", "whether the light casts shadows")
    light_active: np.ndarray = static("(nlight,)", "whether the light is on")
    light_pos: Array = leaf("(nlight, 3)", "position relative to the body frame")
    light_dir: Array = leaf("(nlight, 3)", "direction relative to the body frame")
    light_poscom0: Array = leaf("(nlight, 3)", "global position relative to the subtree com at qpos0")
    light_pos0: Array = leaf("(nlight, 3)", "global position relative to the body at qpos0")
    light_dir0: Array = leaf("(nlight, 3)", "global direction at qpos0")

    # meshes
    mesh_vertadr: np.ndarray = static("(nmesh,)", "first vertex address")
    mesh_vertnum: np.ndarray = static("(nmesh,)", "number of vertices")
    mesh_faceadr: np.ndarray = static("(nmesh,)", "first face address")
    mesh_facenum: np.ndarray = static("(nmesh,)", "number of faces")
    mesh_graphadr: np.ndarray = static("(nmesh,)", "convex-hull graph address, -1 if none")
    mesh_face: np.ndarray = static("(nmeshface, 3)", "vertex indices of each triangle")
    mesh_graph: np.ndarray = static("(nmeshgraph,)", "convex hull graphs (MuJoCo's layout)")
    mesh_polyadr: np.ndarray = static("(nmesh,)", "first polygon of the mesh's hull")
    mesh_polynum: np.ndarray = static("(nmesh,)", "number of hull polygons (coplanar faces merged)")
    mesh_polyvertadr: np.ndarray = static("(npoly,)", "first vertex id of each polygon")
    mesh_polyvertnum: np.ndarray = static("(npoly,)", "number of vertices of each polygon")
    mesh_polyvert: np.ndarray = static("(npolyvert,)", "polygon vertex ids, counter-clockwise about the outward normal")
    mesh_polynormal: Array = leaf("(npoly, 3)", "outward unit normal of each polygon")
    mesh_vert: Array = leaf("(nmeshvert, 3)", "vertex positions in the mesh frame")
    mesh_scale: Array = leaf("(nmesh, 3)", "scaling applied to the asset vertices")
    mesh_pos: Array = leaf("(nmesh, 3)", "translation applied to the asset vertices")
    mesh_quat: Array = leaf("(nmesh, 4)", "rotation applied to the asset vertices")

    # height fields
    hfield_nrow: np.ndarray = static("(nhfield,)", "number of rows in the grid")
    hfield_ncol: np.ndarray = static("(nhfield,)", "number of columns in the grid")
    hfield_adr: np.ndarray = static("(nhfield,)", "address in hfield_data")
    hfield_size: Array = leaf("(nhfield, 4)", "x, y, z_top, z_bottom")
    hfield_data: Array = leaf("(nhfielddata,)", "elevations in [0, 1], row-major")

    # materials (visual only)
    mat_rgba: Array = leaf("(nmat, 4)", "material color")

    # explicit contact pairs and exclusions
    pair_dim: np.ndarray = static("(npair,)", "contact dimensionality")
    pair_geom1: np.ndarray = static("(npair,)", "id of geom1")
    pair_geom2: np.ndarray = static("(npair,)", "id of geom2")
    pair_signature: np.ndarray = static("(npair,)", "body1 << 16 + body2")
    pair_solref: Array = leaf("(npair, 2)", "solref of the normal direction")
    pair_solreffriction: Array = leaf("(npair, 2)", "solref of the frictional directions")
    pair_solimp: Array = leaf("(npair, 5)", "solimp")
    pair_margin: Array = leaf("(npair,)", "detection margin")
    pair_gap: Array = leaf("(npair,)", "inclusion gap")
    pair_friction: Array = leaf("(npair, 5)", "tangent1, tangent2, spin, roll1, roll2")
    pair_adhesion: Array = leaf("(npair,)", "adhesion of the pair")
    exclude_signature: np.ndarray = static("(nexclude,)", "body1 << 16 + body2")

    # equality constraints
    eq_type: np.ndarray = static("(neq,)", "constraint type (EqType)")
    eq_obj1id: np.ndarray = static("(neq,)", "id of object 1")
    eq_obj2id: np.ndarray = static("(neq,)", "id of object 2")
    eq_objtype: np.ndarray = static("(neq,)", "type of both objects (ObjType)")
    eq_active0: np.ndarray = static("(neq,)", "initial enable/disable state")
    eq_solref: Array = leaf("(neq, 2)", "constraint solver reference")
    eq_solimp: Array = leaf("(neq, 5)", "constraint solver impedance")
    eq_data: Array = leaf("(neq, 12)", "type-specific numeric data")

    # tendons
    tendon_adr: np.ndarray = static("(ntendon,)", "address of the first wrap object")
    tendon_num: np.ndarray = static("(ntendon,)", "number of wrap objects")
    tendon_limited: np.ndarray = static("(ntendon,)", "whether the tendon has length limits")
    tendon_actfrclimited: np.ndarray = static("(ntendon,)", "whether actuator force is clamped")
    tendon_treenum: np.ndarray = static("(ntendon,)", "number of trees the tendon spans")
    tendon_treeid: np.ndarray = static("(ntendon, 2)", "first two tree ids spanned")
    tendon_solref_lim: Array = leaf("(ntendon, 2)", "solref of the limit")
    tendon_solimp_lim: Array = leaf("(ntendon, 5)", "solimp of the limit")
    tendon_solref_fri: Array = leaf("(ntendon, 2)", "solref of friction loss")
    tendon_solimp_fri: Array = leaf("(ntendon, 5)", "solimp of friction loss")
    tendon_range: Array = leaf("(ntendon, 2)", "length limits")
    tendon_actfrcrange: Array = leaf("(ntendon, 2)", "range of total actuator force")
    tendon_margin: Array = leaf("(ntendon,)", "minimum distance for limit detection")
    tendon_stiffness: Array = leaf("(ntendon,)", "spring stiffness")
    tendon_stiffnesspoly: Array = leaf("(ntendon, 2)", "second and third order stiffness")
    tendon_damping: Array = leaf("(ntendon,)", "damping coefficient")
    tendon_dampingpoly: Array = leaf("(ntendon, 2)", "second and third order damping")
    tendon_armature: Array = leaf("(ntendon,)", "inertia associated with the tendon velocity")
    tendon_frictionloss: Array = leaf("(ntendon,)", "dry friction loss")
    tendon_hasfrictionloss: np.ndarray = static(
        "(ntendon,)", "has a friction-loss row (frictionloss > 0 when compiled; fixes the rows)")
    tendon_lengthspring: Array = leaf("(ntendon, 2)", "spring resting length range")
    tendon_springyield: Array = leaf("(ntendon,)", "elastic yield of the spring (0: purely elastic)")
    tendon_plasticadr: np.ndarray = static("(ntendon,)", "address of the spring's plastic dead band, -1 if none")
    tendon_length0: Array = leaf("(ntendon,)", "tendon length at qpos0")
    tendon_invweight0: Array = leaf("(ntendon,)", "inverse weight at qpos0")
    tendon_width: Array = leaf("(ntendon,)", "width for rendering")
    tendon_user: Array = leaf("(ntendon, nuser_tendon)", "user data")
    wrap_type: np.ndarray = static("(nwrap,)", "wrap object type (WrapType)")
    wrap_objid: np.ndarray = static("(nwrap,)", "object id: geom, site or joint")
    wrap_prm: Array = leaf("(nwrap,)", "divisor, joint coefficient, or sidesite id")

    # flexes (jaxsim: vertices on bodies, edges, edge spring-dampers; see jaxsim.flex)
    flex_dim: np.ndarray = static("(nflex,)", "1: lines, 2: triangles, 3: tetrahedra")
    flex_vertadr: np.ndarray = static("(nflex,)", "first vertex address")
    flex_vertnum: np.ndarray = static("(nflex,)", "number of vertices")
    flex_edgeadr: np.ndarray = static("(nflex,)", "first edge address")
    flex_edgenum: np.ndarray = static("(nflex,)", "number of edges")
    flex_elemadr: np.ndarray = static("(nflex,)", "first element address")
    flex_elemnum: np.ndarray = static("(nflex,)", "number of elements")
    flex_rigid: np.ndarray = static("(nflex,)", "all vertices on one body")
    flex_centered: np.ndarray = static("(nflex,)", "all vertices at their body origins")
    flex_contype: np.ndarray = static("(nflex,)", "contact type bits")
    flex_conaffinity: np.ndarray = static("(nflex,)", "contact affinity bits")
    flex_condim: np.ndarray = static("(nflex,)", "contact dimensionality")
    flex_selfcollide: np.ndarray = static("(nflex,)", "self-collision mode (0: none)")
    flex_priority: np.ndarray = static("(nflex,)", "contact parameter priority")
    flex_activelayers: np.ndarray = static("(nflex,)", "3D: element layers that collide")
    flex_elem: np.ndarray = static("(nflexelem, 4)", "element vertex ids, local to the flex "
                                   "(dim + 1 used, the rest -1)")
    flex_elemlayer: np.ndarray = static("(nflexelem,)", "3D: graph distance to the surface")
    flex_edgeequality: np.ndarray = static("(nflex,)", "edge equality constraint (1: edges)")
    flex_haspassive: np.ndarray = static(
        "(nflex,)", "edge stiffness or damping nonzero when compiled (fixes which edges get "
        "passive forces)")
    flex_stretch: np.ndarray = static("(nflex,)", "stretch elasticity (a nonzero metric)")
    flex_bend: np.ndarray = static("(nflex,)", "bending elasticity (2D, elastic2d bend/both)")
    flex_elemedge: np.ndarray = static("(nflexelem, 6)", "element edge ids, local to the flex "
                                       "(in MuJoCo's edge order; -1 past the element's edges)")
    flex_edgeflap: np.ndarray = static("(nflexedge, 2)", "2D: third vertex of the triangles on "
                                       "each side of an edge (local; -1 on the boundary)")
    flex_vertbodyid: np.ndarray = static("(nflexvert,)", "body carrying each vertex")
    flex_edge: np.ndarray = static("(nflexedge, 2)", "edge vertex ids, local to the flex")
    flexedge_rigid: np.ndarray = static("(nflexedge,)", "both ends on one welded body")
    flex_where: tuple = static("(nflex,)", "source of each flex (file:line and name)")
    flex_vert: Array = leaf("(nflexvert, 3)", "vertex offsets in their bodies' frames")
    flex_radius: Array = leaf("(nflex,)", "radius of the flex geometry")
    flex_margin: Array = leaf("(nflex,)", "contact margin")
    flex_gap: Array = leaf("(nflex,)", "contact gap")
    flex_solmix: Array = leaf("(nflex,)", "solver parameter mixing weight")
    flex_friction: Array = leaf("(nflex, 3)", "sliding, torsional, rolling friction")
    flex_solref: Array = leaf("(nflex, 2)", "contact solver reference")
    flex_solimp: Array = leaf("(nflex, 5)", "contact solver impedance")
    flex_edgestiffness: Array = leaf("(nflex,)", "edge spring stiffness")
    flex_edgedamping: Array = leaf("(nflex,)", "edge damping")
    flex_damping: Array = leaf("(nflex,)", "elasticity damping (Rayleigh, of stretch and bending)")
    flex_stiffness: Array = leaf("(nflexelem, 21)", "stretch metric per element: upper "
                                 "triangle of the edge metric, row by row, zero padded")
    flex_bending: Array = leaf("(nflexedge, 17)", "bending matrix per edge (4 x 4 over the "
                               "edge's vertices and flaps, then the curved-reference term)")
    flexedge_length0: Array = leaf("(nflexedge,)", "edge lengths at qpos0")
    flexedge_invweight0: Array = leaf("(nflexedge,)", "edge inverse weights at qpos0")

    # actuators
    actuator_trntype: np.ndarray = static("(nactuator,)", "transmission type (TrnType)")
    actuator_dyntype: np.ndarray = static("(nactuator,)", "dynamics type (DynType)")
    actuator_gaintype: np.ndarray = static("(nactuator,)", "gain type (GainType)")
    actuator_biastype: np.ndarray = static("(nactuator,)", "bias type (BiasType)")
    actuator_trnid: np.ndarray = static("(nactuator, 2)", "transmission ids: joint/tendon/site, refsite")
    actuator_actadr: np.ndarray = static("(nactuator,)", "first activation address, -1 if stateless")
    actuator_actnum: np.ndarray = static("(nactuator,)", "number of activation variables")
    actuator_ctrladr: np.ndarray = static("(nactuator,)", "first control address")
    actuator_ctrlnum: np.ndarray = static("(nactuator,)", "number of controls")
    actuator_ctrlspec: np.ndarray = static("(nactuator,)", "input signature: SO3 chart or pid/dcmotor input bits")
    actuator_outadr: np.ndarray = static("(nactuator,)", "first output address (row of actuator_moment)")
    actuator_outnum: np.ndarray = static("(nactuator,)", "number of outputs")
    actuator_group: np.ndarray = static("(nactuator,)", "group for visibility and disabling")
    actuator_history: np.ndarray = static("(nactuator, 2)", "history buffer: number of samples, interpolation")
    actuator_historyadr: np.ndarray = static("(nactuator,)", "address in the history buffer")
    actuator_ctrllimited: np.ndarray = static("(nu,)", "whether controls are clamped")
    actuator_forcelimited: np.ndarray = static("(nactuator,)", "whether force is clamped")
    actuator_actlimited: np.ndarray = static("(nactuator,)", "whether activation is clamped")
    actuator_actearly: np.ndarray = static("(nactuator,)", "whether the force uses the next activation")
    actuator_delay: Array = leaf("(nactuator,)", "control delay (s)")
    actuator_dynprm: Array = leaf("(nactuator, 10)", "dynamics parameters")
    actuator_gainprm: Array = leaf("(nactuator, 10)", "gain parameters")
    actuator_biasprm: Array = leaf("(nactuator, 10)", "bias parameters")
    actuator_damping: Array = leaf("(nactuator,)", "damping applied along the transmission")
    actuator_dampingpoly: Array = leaf("(nactuator, 2)", "second and third order damping")
    actuator_armature: Array = leaf("(nactuator,)", "armature inertia along the transmission")
    actuator_ctrlrange: Array = leaf("(nu, 2)", "range of controls")
    actuator_forcerange: Array = leaf("(nactuator, 2)", "range of forces")
    actuator_actrange: Array = leaf("(nactuator, 2)", "range of activations")
    actuator_gear: Array = leaf("(nout, 6)", "scale length and transmitted force")
    actuator_cranklength: Array = leaf("(nactuator,)", "crank length for slider-crank")
    actuator_acc0: Array = leaf("(nout,)", "acceleration from unit force at qpos0")
    actuator_length0: Array = leaf("(nout,)", "actuator length at qpos0")
    actuator_lengthrange: Array = leaf("(nout, 2)", "feasible actuator length range")
    actuator_user: Array = leaf("(nactuator, nuser_actuator)", "user data")

    # sensors
    sensor_type: np.ndarray = static("(nsensor,)", "sensor type (SensorType)")
    sensor_datatype: np.ndarray = static("(nsensor,)", "numeric data type (DataType)")
    sensor_needstage: np.ndarray = static("(nsensor,)", "stage the sensor needs (Stage)")
    sensor_objtype: np.ndarray = static("(nsensor,)", "type of the sensorized object (ObjType)")
    sensor_objid: np.ndarray = static("(nsensor,)", "id of the sensorized object")
    sensor_reftype: np.ndarray = static("(nsensor,)", "type of the reference frame (ObjType)")
    sensor_refid: np.ndarray = static("(nsensor,)", "id of the reference frame, -1: global")
    sensor_intprm: np.ndarray = static("(nsensor, 3)", "integer parameters")
    sensor_dim: np.ndarray = static("(nsensor,)", "number of scalar outputs")
    sensor_adr: np.ndarray = static("(nsensor,)", "address in sensordata")
    sensor_history: np.ndarray = static("(nsensor, 2)", "history buffer: samples, interpolation")
    sensor_historyadr: np.ndarray = static("(nsensor,)", "address in the history buffer")
    sensor_cutoff: Array = leaf("(nsensor,)", "cutoff for real and positive data, 0: none")
    sensor_noise: Array = leaf("(nsensor,)", "noise standard deviation (not applied)")
    sensor_delay: Array = leaf("(nsensor,)", "sensor delay (s)")
    sensor_interval: Array = leaf("(nsensor, 2)", "sampling period and phase")
    sensor_user: Array = leaf("(nsensor, nuser_sensor)", "user data")

    # custom
    numeric_adr: np.ndarray = static("(nnumeric,)", "address in numeric_data")
    numeric_size: np.ndarray = static("(nnumeric,)", "size of the numeric field")
    numeric_data: Array = leaf("(nnumericdata,)", "array of all numeric fields")
    text_data: tuple = static("(ntext,)", "text custom fields")
    tuple_adr: np.ndarray = static("(ntuple,)", "address in tuple_objtype")
    tuple_size: np.ndarray = static("(ntuple,)", "number of objects in the tuple")
    tuple_objtype: np.ndarray = static("(ntupledata,)", "object types (ObjType)")
    tuple_objid: np.ndarray = static("(ntupledata,)", "object ids")
    tuple_objprm: Array = leaf("(ntupledata,)", "object parameters")

    # keyframes
    key_time: Array = leaf("(nkey,)", "keyframe time")
    key_qpos: Array = leaf("(nkey, nq)", "keyframe position")
    key_qvel: Array = leaf("(nkey, nv)", "keyframe velocity")
    key_act: Array = leaf("(nkey, na)", "keyframe activation")
    key_mpos: Array = leaf("(nkey, nmocap, 3)", "keyframe mocap positions")
    key_mquat: Array = leaf("(nkey, nmocap, 4)", "keyframe mocap orientations")
    key_ctrl: Array = leaf("(nkey, nu)", "keyframe control")
    key_plastic: Array = leaf("(nkey, nplastic)", "keyframe plastic state")

    # statistics and names
    stat_meaninertia: Array = leaf("()", "mean diagonal inertia at qpos0")
    stat_meanmass: Array = leaf("()", "mean body mass")
    stat_meansize: Array = leaf("()", "mean body size")
    stat_extent: Array = leaf("()", "spatial extent of the model")
    stat_center: Array = leaf("(3,)", "center of the model")
    names: tuple = static("-", "per object type (ObjType order), the tuple of names ('' if none)")
    model_name: str = static("()", "model name from <mujoco model=...>")

    @classmethod
    def size_names(cls) -> tuple[str, ...]:
        return tuple(_SIZES)

    def sizes(self) -> dict[str, int]:
        """All counts as a dict."""
        return {n: getattr(self, n) for n in _SIZES}

    def out2act(self) -> np.ndarray:
        """The actuator of each actuator output row, (nout,) (numpy: static structure)."""
        return np.repeat(np.arange(self.nactuator), np.asarray(self.actuator_outnum, np.int64))

    def name2id(self, objtype: ObjType | int, name: str) -> int:
        """Id of the named object of the given type, -1 if absent (mj_name2id)."""
        try:
            return self.names[int(objtype)].index(name)
        except (ValueError, IndexError):
            return -1

    def id2name(self, objtype: ObjType | int, i: int) -> str:
        """Name of the object, '' if unnamed (mj_id2name)."""
        return self.names[int(objtype)][i]


# ---------------------------------------------------------------------------- state, contact


class Contact(Struct):
    """Fixed-size contact buffer (mjContact), `ncon` slots; `active` marks real contacts."""

    dist: Array = leaf("(ncon,)", "signed distance between the geoms (negative: penetration)")
    pos: Array = leaf("(ncon, 3)", "contact point (midpoint between the geoms)")
    frame: Array = leaf("(ncon, 3, 3)", "contact frame, rows are axes, the normal first")
    includemargin: Array = leaf("(ncon,)", "rows only where dist < includemargin (the margin)")
    friction: Array = leaf("(ncon, 5)", "tangent1, tangent2, spin, roll1, roll2")
    solref: Array = leaf("(ncon, 2)", "constraint solver reference, normal direction")
    solreffriction: Array = leaf("(ncon, 2)", "constraint solver reference, friction directions")
    solimp: Array = leaf("(ncon, 5)", "constraint solver impedance")
    dim: Array = leaf("(ncon,)", "contact space dimensionality: 1, 3, 4 or 6")
    geom: Array = leaf("(ncon, 2)", "ids of the two geoms (-1 on a flex side)")
    flex: Array = leaf("(ncon, 2)", "flex ids of the two sides (-1 on a geom side)")
    elem: Array = leaf("(ncon, 2)", "flex element ids (-1: none)")
    vert: Array = leaf("(ncon, 2)", "flex vertex ids, local to the flex (-1: none)")
    efc_address: Array = leaf("(ncon,)", "address in the constraint rows, -1 if excluded")
    active: Array = leaf("(ncon,)", "true where the slot holds a contact MuJoCo would report")
    exclude: Array = leaf("(ncon,)", "in the gap (dist >= includemargin): no constraint rows")
    adhesion: Array = leaf("(ncon,)", "adhesion of the pair (from geoms or <pair>)")

    @classmethod
    def zeros(cls, ncon: int, dtype) -> Contact:
        # numpy inside hostnp.host_backend(): set_const builds its State with this
        from jaxsim.hostnp import jnp

        f = lambda *s: jnp.zeros(s, dtype)  # noqa: E731
        frame = jnp.tile(jnp.eye(3, dtype=dtype), (ncon, 1, 1))
        return cls(
            dist=f(ncon), pos=f(ncon, 3), frame=frame, includemargin=f(ncon),
            friction=f(ncon, 5), solref=f(ncon, 2), solreffriction=f(ncon, 2),
            solimp=f(ncon, 5), dim=jnp.zeros(ncon, jnp.int32),
            geom=jnp.full((ncon, 2), -1, jnp.int32), flex=jnp.full((ncon, 2), -1, jnp.int32),
            elem=jnp.full((ncon, 2), -1, jnp.int32), vert=jnp.full((ncon, 2), -1, jnp.int32),
            efc_address=jnp.full(ncon, -1, jnp.int32),
            active=jnp.zeros(ncon, bool), exclude=jnp.zeros(ncon, bool), adhesion=f(ncon),
        )


class State(Struct):
    """Simulation state and everything computed from it (mjData). All fields are leaves."""

    # integration state and user inputs
    time: Array = leaf("()", "simulation time")
    qpos: Array = leaf("(nq,)", "position")
    qvel: Array = leaf("(nv,)", "velocity")
    act: Array = leaf("(na,)", "actuator activation")
    plastic: Array = leaf("(nplastic,)", "plastic spring references (joints, then tendon dead bands)")
    history: Array = leaf("(nhistory,)", "actuator and sensor history buffers")
    userdata: Array = leaf("(nuserdata,)", "user data, untouched by the simulator")
    qacc_warmstart: Array = leaf("(nv,)", "acceleration used to warmstart the solver")
    ctrl: Array = leaf("(nu,)", "control")
    qfrc_applied: Array = leaf("(nv,)", "applied generalized force")
    xfrc_applied: Array = leaf("(nbody, 6)", "applied Cartesian force/torque at the body com")
    eq_active: Array = leaf("(neq,)", "enable/disable equality constraints")
    mocap_pos: Array = leaf("(nmocap, 3)", "positions of mocap bodies")
    mocap_quat: Array = leaf("(nmocap, 4)", "orientations of mocap bodies")
    tree_asleep: Array = leaf("(ntree,)", "sleep state of each tree: < 0 awake (-1: ready to "
                              "sleep), >= 0 asleep (the next tree of its sleeping island)")
    qacc: Array = leaf("(nv,)", "acceleration")
    act_dot: Array = leaf("(na,)", "time derivative of the activation")

    # position dependent
    xpos: Array = leaf("(nbody, 3)", "Cartesian position of the body frame")
    xquat: Array = leaf("(nbody, 4)", "Cartesian orientation of the body frame")
    xmat: Array = leaf("(nbody, 3, 3)", "Cartesian orientation of the body frame")
    xipos: Array = leaf("(nbody, 3)", "Cartesian position of the body com")
    ximat: Array = leaf("(nbody, 3, 3)", "Cartesian orientation of the body inertia")
    xanchor: Array = leaf("(njnt, 3)", "Cartesian position of the joint anchor")
    xaxis: Array = leaf("(njnt, 3)", "Cartesian joint axis")
    geom_xpos: Array = leaf("(ngeom, 3)", "Cartesian geom position")
    geom_xmat: Array = leaf("(ngeom, 3, 3)", "Cartesian geom orientation")
    site_xpos: Array = leaf("(nsite, 3)", "Cartesian site position")
    site_xmat: Array = leaf("(nsite, 3, 3)", "Cartesian site orientation")
    cam_xpos: Array = leaf("(ncam, 3)", "Cartesian camera position")
    cam_xmat: Array = leaf("(ncam, 3, 3)", "Cartesian camera orientation")
    subtree_com: Array = leaf("(nbody, 3)", "center of mass of each subtree")
    cdof: Array = leaf("(nv, 6)", "com-based motion axis of each dof (rot:lin)")
    cinert: Array = leaf("(nbody, 10)", "com-based body inertia and mass")
    ten_wrapadr: Array = leaf("(ntendon,)", "start address of the tendon's path")
    ten_wrapnum: Array = leaf("(ntendon,)", "number of wrap points in the path")
    ten_J: Array = leaf("(ntendon, nv)", "tendon Jacobian")
    ten_length: Array = leaf("(ntendon,)", "tendon lengths")
    wrap_obj: Array = leaf("(nwrap * 2,)", "geom id; -1: site; -2: pulley")
    wrap_xpos: Array = leaf("(nwrap * 2, 3)", "Cartesian 3D points in all paths")
    actuator_length: Array = leaf("(nout,)", "actuator lengths")
    actuator_moment: Array = leaf("(nout, nv)", "actuator moments (dense)")
    crb: Array = leaf("(nbody, 10)", "com-based composite inertia and mass")
    qM: Array = leaf("(nv, nv)", "joint-space inertia matrix (dense)")
    qLD: Array = leaf("(nv, nv)", "L'DL factorisation of qM: D on the diagonal, L below it")
    qLDiagInv: Array = leaf("(nv,)", "1 / D")

    # velocity dependent
    ten_velocity: Array = leaf("(ntendon,)", "tendon velocities")
    actuator_velocity: Array = leaf("(nout,)", "actuator velocities")
    cvel: Array = leaf("(nbody, 6)", "com-based velocity (rot:lin)")
    cdof_dot: Array = leaf("(nv, 6)", "time derivative of cdof")
    qfrc_bias: Array = leaf("(nv,)", "C(qpos, qvel)")
    qfrc_spring: Array = leaf("(nv,)", "passive spring force")
    qfrc_damper: Array = leaf("(nv,)", "passive damper force")
    qfrc_gravcomp: Array = leaf("(nv,)", "passive gravity compensation force")
    qfrc_fluid: Array = leaf("(nv,)", "passive fluid force")
    qfrc_passive: Array = leaf("(nv,)", "total passive force")

    # acceleration / force dependent
    actuator_force: Array = leaf("(nout,)", "actuator force in actuation space")
    qfrc_actuator: Array = leaf("(nv,)", "actuator force")
    qfrc_smooth: Array = leaf("(nv,)", "net unconstrained force")
    qacc_smooth: Array = leaf("(nv,)", "unconstrained acceleration")
    qfrc_constraint: Array = leaf("(nv,)", "constraint force")
    qfrc_inverse: Array = leaf("(nv,)", "net external force; should equal the applied forces")
    cacc: Array = leaf("(nbody, 6)", "com-based acceleration")
    cfrc_int: Array = leaf("(nbody, 6)", "com-based interaction force with the parent")
    cfrc_ext: Array = leaf("(nbody, 6)", "com-based external force on the body")

    # contacts and constraints
    contact: Contact = leaf("-", "fixed-size contact buffer")
    ncon: Array = leaf("()", "number of active contacts")
    efc_force: Array = leaf("(nefc,)", "constraint force per row (0 on inactive rows)")
    efc_state: Array = leaf("(nefc,)", "constraint state per row (ConstraintState)")
    efc_active: Array = leaf("(nefc,)", "true where the row exists in MuJoCo now")
    solver_niter: Array = leaf("()", "number of solver iterations")
    tree_island: Array = leaf("(ntree,)", "constraint island of each tree, named by its "
                              "smallest tree id; -1 if no constraint row touches the tree")
    solver_fwdinv: Array = leaf("(2,)", "fwdinv flag: |qfrc_constraint| and |qfrc_inverse| "
                                "differences between forward and inverse dynamics")
    overflow: Array = leaf("()", "true when a fixed buffer was too small for this state")
    maxuse_con: Array = leaf("()", "most contact slots needed so far")
    warning: Array = leaf("(8,)", "warning counters (Warning enum order)")
    sensordata: Array = leaf("(nsensordata,)", "sensor data")
    energy: Array = leaf("(2,)", "potential and kinetic energy")
