"""The forward pipeline and the step: fwd_position, fwd_velocity, fwd_actuation,
fwd_acceleration, forward, step, step1/step2. MuJoCo: engine_forward.c.

Collision detection runs in fwd_position and fills `state.contact`; fwd_constraint builds
the constraint rows (constraint.py) and solves for the constrained acceleration
(solver.py).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jaxsim import actuation as _actuation
from jaxsim import constraint as _constraint
from jaxsim import flex as _flex
from jaxsim import integrator as _integrator
from jaxsim import loops, smooth
from jaxsim import passive as _passive
from jaxsim import rne as _rne
from jaxsim import sensor as _sensor
from jaxsim import sleep as _sleep
from jaxsim import solver as _solver
from jaxsim.collision import driver as _collision
from jaxsim.types import (
    DisableBit,
    EnableBit,
    GeomType,
    Integrator,
    JointType,
    Model,
    Stage,
    State,
    Warning,
)


def _np(x) -> np.ndarray:
    return np.asarray(x, dtype=np.int64)


# ----------------------------------------------------------------------------- stages


def fwd_position(m: Model, d: State) -> State:
    """Position-dependent quantities and contacts. MuJoCo: mj_fwdPosition (the constraint
    rows are built in fwd_constraint, where the velocities they need exist)."""
    asleep = _sleep.enabled(m)
    d_in = d
    d = smooth.kinematics(m, d)
    if asleep:
        d = _sleep.wake_perturbed(m, d_in, d)
    d = smooth.com_pos(m, d)
    d = smooth.camlight(m, d)
    d = smooth.tendon(m, d)
    if asleep:
        d = _sleep.wake_tendon(m, _sleep.clear_sleeping_tendons(m, d))
    d = smooth.make_m(m, d)
    d = smooth.factor_m(m, d)
    _flex.check_supported(m)
    d = _collision.collision(m, d)
    if asleep:
        d = _sleep.wake_equality(m, _sleep.wake_collision(m, d))
    return smooth.transmission(m, d)


def fwd_velocity(m: Model, d: State) -> State:
    """Velocity-dependent quantities. MuJoCo: mj_fwdVelocity.

    ten_velocity, actuator_velocity, cvel / cdof_dot, passive forces, and qfrc_bias (RNE
    without acceleration plus the tendon-armature bias).
    """
    d = _passive.tendon_actuator_velocity(m, d)
    d = smooth.com_vel(m, d)
    d = _passive.passive(m, d)
    return _rne.rne(m, d)


def fwd_actuation(m: Model, d: State) -> State:
    """Actuator forces and activation rates. MuJoCo: mj_fwdActuation."""
    return _actuation.actuation(m, d)


def xfrc_accumulate(m: Model, d: State) -> jax.Array:
    """Generalized force of xfrc_applied, each wrench acting at its body's com.

    MuJoCo: mj_xfrcAccumulate.
    """
    if not m.nv or m.nbody < 2:
        return jnp.zeros(m.nv, d.qpos.dtype)
    b = np.arange(1, m.nbody)

    def accumulate(x, xipos, com, cdof):
        dd = d.replace(subtree_com=com, cdof=cdof)
        return _passive.apply_ft(m, dd, x[:, :3], x[:, 3:], xipos[b], b)

    # mostly no wrench is applied: skipped then (as MuJoCo skips zero wrenches)
    return loops.zero_unless(accumulate, d.xfrc_applied[b], d.xipos, d.subtree_com, d.cdof)


def fwd_acceleration(m: Model, d: State) -> State:
    """Net smooth force and the unconstrained acceleration. MuJoCo: mj_fwdAcceleration.

    qfrc_smooth = qfrc_passive - qfrc_bias + qfrc_applied + qfrc_actuator + J' xfrc_applied;
    qacc_smooth = M^-1 qfrc_smooth.
    """
    qfrc = d.qfrc_passive - d.qfrc_bias + d.qfrc_applied + d.qfrc_actuator
    qfrc = qfrc + xfrc_accumulate(m, d)
    return d.replace(qfrc_smooth=qfrc, qacc_smooth=smooth.solve_m(m, d, qfrc))


def fwd_constraint(m: Model, d: State) -> State:
    """Constraint rows, forces and the constrained acceleration. MuJoCo: mj_makeConstraint,
    mj_referenceConstraint and mj_fwdConstraint (Newton, CG or PGS; see solver.py).

    With the compact problem on (`model.ncompact`: -1 automatic, the default, for contact
    buffers of 12 slots or more; a slot count kc; 0 off) a world with at most kc active
    contacts builds and solves the rows of only those (`_compact_slots`): for a contact
    buffer of which a few contacts are usual (the buffer holds the worst case), at the cost
    of a second compilation. The rows keep MuJoCo's order, the answer is the same up to
    rounding, and the forces, states and activity are scattered back to the whole layout.
    Batched, the whole problem runs only for the worlds with more contacts (`loops.cond`)."""
    p = _constraint.plan(m, d.contact.dist.shape[0])
    out = None
    if _sleep.enabled(m):
        efc = _constraint.make_constraint(m, d)
        d = d.replace(tree_island=_islands(m, d, efc))
        out = _solve_rows(m, d, efc)
    elif p.nefc and m.nv:
        kc = _compact_slots(m, p)
        out = _constraint_stage(m, d) if kc is None else _compact_stage(m, d, p, kc)
    if out is None:
        return d.replace(qacc=d.qacc_smooth, qfrc_constraint=jnp.zeros_like(d.qacc_smooth),
                         efc_force=jnp.zeros(p.nefc, d.qacc.dtype))
    qacc, qfrc, force, state, active, niter = out
    c = d.contact
    on = c.active & ~c.exclude if p.nrow else jnp.zeros_like(c.active)
    con = c.replace(efc_address=jnp.where(on, jnp.asarray(p.cadr, jnp.int32), -1))
    return d.replace(qacc=qacc, qfrc_constraint=qfrc, efc_force=force, efc_state=state,
                     efc_active=active, solver_niter=niter, contact=con)


def _solve_rows(m: Model, d: State, efc):
    """(qacc, qfrc_constraint, efc_force, efc_state, efc_active, solver_niter) of the rows
    in `efc`, or None without rows."""
    if efc.J.shape[0] == 0:
        return None
    qacc, force, state, info = _solver.solve(m, d, efc)
    return (qacc, efc.J.T @ force, force, state.astype(jnp.int32), efc.active,
            jnp.asarray(info.niter, jnp.int32))


def _constraint_stage(m: Model, d: State):
    return _solve_rows(m, d, _constraint.make_constraint(m, d))


# The compact problem compiles the rows and the solver a second time (the gymnasium ant at
# batch 1024: +5-8 s); where it applies, it saves the work of the unused slots' rows in the
# row construction, the solver and J'f. Measured 2026-11-30, batch 1024, float32, 100 steps
# from the initial pose, alternated medians, steps/s (compile s), off -> on:
#   gymnasium ant (25 slots, 6 compact)          7486 (14.2) -> 10796 (19.0)
#   gymnasium hopper (14 slots, 4 compact)      20736 (11.8) -> 25412 (17.9)
#   gymnasium half_cheetah (16 slots, 4 compact) 58704 (7.9) -> 90992 (13.0)
#   gymnasium humanoid (190 slots, 11 compact, PGS) 1199 -> 1829 (at 9cc5f12)
# and the mjx humanoid (8 slots) at 2 compact, which it does not get: 34283 -> 23158 (a
# quarter of the slots is fewer than its feet use). Automatic (`model.ncompact` -1, the
# default): a sixteenth of the slots, at least a quarter of them up to 8, at least
# _COMPACT_MIN and at least half as much again as the free bodies' contacts at rest
# (_resting_contacts), when that is at most a third of the slots; 0 off; a positive value
# is the slot count.
_COMPACT_MIN = 4
# ... and at least what the free bodies use at rest, half as much again: a free body resting
# on its support touches it at one point (a sphere or an ellipsoid), two (a capsule) or
# four (a box, a cylinder, a mesh; its geom with the most counts), and a compact problem
# smaller than what a scene of resting objects uses sends every world to the whole
# problem (models/pile10.xml, 5 boxes and 5 spheres, 140 slots, about 30 contacts in use,
# batch 64, 10 steps from a warm state, alternated medians: 8 slots 1133 ms, 40 slots
# 870 ms, the compact problem off 1422 ms; box_pile, 50 -> 64 slots: 1006 -> 971 ms;
# robots on one free base keep their sizes).
_COMPACT_REST = {GeomType.SPHERE: 1, GeomType.ELLIPSOID: 1, GeomType.CAPSULE: 2}


def _resting_contacts(m: Model) -> int:
    """Contacts the free bodies' own colliding geoms use at rest (see _COMPACT_REST; 4 for
    the other types)."""
    jtype, jbody = np.asarray(m.jnt_type), np.asarray(m.jnt_bodyid)
    gbody, gtype = np.asarray(m.geom_bodyid), np.asarray(m.geom_type)
    collide = (np.asarray(m.geom_contype) | np.asarray(m.geom_conaffinity)) != 0
    total = 0
    for b in jbody[jtype == JointType.FREE]:
        own = gtype[(gbody == b) & collide]
        total += max((_COMPACT_REST.get(GeomType(int(t)), 4) for t in own), default=0)
    return total

# Single worlds and small batches (at most loops._MIN_BATCH) take the compact problem too
# when the whole one has more rows than this (2026-12-01, batch 1, ms per 100 steps from a
# 60-step warm state, 2 cores, whole problem -> compact or whole by a branch): gymnasium
# ant (116 rows) 67.5 -> 39.1, humanoid (311 rows, PGS, per 20 steps) 60.1 -> 35.9,
# half_cheetah (76 rows) 10.4 -> 9.2; hopper (44 rows) 35.3 -> 38.2 and walker2d (68 rows,
# one core, fresh programs) 33.5 -> 34.2, so the smaller problems stay whole. The branch
# compiles the rows and the solver twice (+3 s at batch 1 on the ant).
_COMPACT_SMALL_ROWS = 96


def _compact_slots(m: Model, p) -> int | None:
    """Contact slots of the compact problem (static), or None to always use them all."""
    if not p.nrow or not m.ncompact:
        return None
    if m.ncompact < 0:
        k = max(_COMPACT_MIN, p.ncon // 16, min(8, p.ncon // 4),
                -(-3 * _resting_contacts(m) // 2))
    else:
        k = int(m.ncompact)
    return k if 3 * k <= p.ncon else None


def _compact_stage(m: Model, d: State, p, kc: int):
    """`_constraint_stage` on the first `kc` contacts with rows when the world has no more,
    on all of them otherwise. Derivatives are those of the chosen branch (a `lax.cond`);
    the primal alone goes through `loops.cond`, which batched runs the whole problem only
    for the worlds that need it. A single world, or a batch of at most 16, takes one branch
    or the other (`lax.cond`) when the whole problem has more than `_COMPACT_SMALL_ROWS`
    rows, and otherwise solves the whole problem (and compiles it alone): small problems
    cost less than the branch and its gathers."""

    nefc, nf = p.nefc, p.nfixed

    def need(d):
        return jnp.sum(d.contact.active & ~d.contact.exclude) <= kc

    def small(m, d):
        c = d.contact
        on = c.active & ~c.exclude
        sel = loops.true_first(on, kc)
        valid = on[sel]
        cs = jax.tree.map(lambda x: x[sel], c)
        out = _constraint_stage(m, d.replace(contact=cs.replace(active=cs.active & valid)))
        qacc, qfrc, force, state, active, niter = out
        pc = _constraint.plan(m, kc)
        rows = np.arange(pc.nrow)
        into = jnp.asarray(p.cadr, jnp.int32)[sel][:, None] + rows
        ok = valid[:, None] & (rows < jnp.asarray(p.crow, jnp.int32)[sel][:, None])
        dest = jnp.concatenate([jnp.arange(nf, dtype=jnp.int32),
                                jnp.where(ok, into, nefc).reshape(-1)])

        def back(x, fill):
            return jnp.full(nefc, fill, x.dtype).at[dest].set(x, mode="drop")

        return (qacc, qfrc, back(force, 0), back(state, _solver._SAT), back(active, False),
                niter)

    def full(m, d):
        return _constraint_stage(m, d)

    @jax.custom_jvp
    def run(m, d):
        return loops.cond(need(d), lambda: small(m, d), lambda: full(m, d),
                          large_batch_only=nefc <= _COMPACT_SMALL_ROWS,
                          branch_small=nefc > _COMPACT_SMALL_ROWS)

    @run.defjvp
    def run_jvp(primals, tangents):
        return jax.jvp(lambda m, d: jax.lax.cond(need(d), small, full, m, d), primals,
                       tangents)

    return run(m, d)


def _islands(m: Model, d: State, efc) -> jax.Array:
    """Constraint islands of the rows just built (mj_island); none with the island flag
    disabled."""
    if m.opt.disableflags & DisableBit.ISLAND or efc.J.shape[0] == 0:
        return jnp.full(m.ntree, -1, jnp.int32)
    p = _constraint.plan(m, d.contact.dist.shape[0])
    types, ids = _constraint.fixed_row_objects(p)
    fixed = _sleep.row_trees(m, types, ids, _constraint.row_flex_edges(p))
    con_on = efc.contact_dim > 0 if p.nrow else None
    return _sleep.islands(m, d, fixed, efc.active[:p.nfixed], con_on)


# ------------------------------------------------------------------------ value checks

MAXVAL = 1e10  # mjMAXVAL: larger magnitudes count as a blow-up (mju_isBad)


def _is_bad(x: jax.Array) -> jax.Array:
    """Whether any entry is NaN or beyond +-MAXVAL (mju_isBad over a vector)."""
    if x.size == 0:
        return jnp.zeros((), bool)
    return jnp.any(~(jnp.abs(x) <= MAXVAL))


def reset_where(m: Model, d: State, bad: jax.Array, warning: int) -> State:
    """The state reset (mj_resetData) where `bad`, with the warning counted as MuJoCo does.

    `bad` is a traced scalar: in a vmapped batch each world decides for itself, and a world
    that is not reset keeps its values bit for bit. With the autoreset flag disabled only
    the warning is counted.
    """
    if m.opt.disableflags & DisableBit.AUTORESET:
        return d.replace(warning=d.warning.at[warning].add(bad.astype(d.warning.dtype)))
    from jaxsim.state import make_state

    fresh = make_state(m, ncon=d.contact.dist.shape[0])
    # mj_resetData clears the warnings, then the check counts its own
    fresh = fresh.replace(warning=fresh.warning.at[warning].set(1))
    _check_layout(fresh, d)
    fresh = jax.tree.map(lambda a, b: a.astype(b.dtype), fresh, d)
    return loops.where(bad, fresh, d)


def _check_layout(fresh: State, d: State) -> None:
    """A ValueError naming the first field of `d` whose shape is not the fresh state's: `d`
    was made for a model of another layout (e.g. before a change of `opt.disableflags` that
    adds or removes constraint rows), so no reset state lines up with it."""
    have = jax.tree_util.tree_flatten_with_path(d)[0]
    for (path, a), b in zip(have, jax.tree.leaves(fresh), strict=True):
        if jnp.shape(a) != jnp.shape(b):
            name = jax.tree_util.keystr(path).lstrip(".")
            raise ValueError(
                f"state.{name} has shape {jnp.shape(a)} where this model's states have "
                f"{jnp.shape(b)}: the state was made for a model of another layout (a "
                "changed disable flag adds or removes constraint rows); make it with "
                "jaxsim.make_state(model) for this model")


def check_pos_vel(m: Model, d: State) -> State:
    """mj_checkPos then mj_checkVel: reset a world whose qpos or qvel is bad.

    One selection over the state: after a qpos reset the velocity check passes, so a
    world counts BADQPOS if its qpos is bad and BADQVEL if only its qvel is.
    """
    bad_pos, bad_vel = _is_bad(d.qpos), _is_bad(d.qvel)
    if m.opt.disableflags & DisableBit.AUTORESET:
        w = d.warning.dtype
        return d.replace(warning=d.warning.at[Warning.BADQPOS].add(bad_pos.astype(w))
                         .at[Warning.BADQVEL].add(bad_vel.astype(w)))
    d = reset_where(m, d, bad_pos | bad_vel, Warning.BADQPOS)
    only_vel = jnp.zeros_like(d.warning).at[Warning.BADQVEL].set(1)
    return d.replace(warning=jnp.where(bad_vel & ~bad_pos, only_vel, d.warning))


def check_acc(m: Model, d: State) -> State:
    """mj_checkAcc: reset a world whose qacc is bad.

    MuJoCo then runs mj_forward on the reset state and integrates it in the same step; a
    reset world here skips the integration of this step instead (see `step`), which spares
    every world of a batch a second forward pass.
    """
    return reset_where(m, d, _is_bad(d.qacc), Warning.BADQACC)


# --------------------------------------------------------------------------- pipeline


def acc_sensors(m: Model, d: State) -> State:
    """Acceleration-stage sensors, after mj_rnePostConstraint when one of them needs cacc
    or cfrc_int. MuJoCo: mj_sensorAcc."""
    if _sensor.needs_rne_post(m):
        d = _rne.rne_post_constraint(m, d)
    return _sensor.sensor_acc(m, d)


def pos_vel_stages(m: Model, d: State, skipstage: int, skipsensor: bool) -> State:
    """The position and velocity stages (and their sensors) not skipped by `skipstage`,
    shared by forward_skip and inverse_skip."""
    energy = bool(m.opt.enableflags & EnableBit.ENERGY)
    if skipstage < Stage.POS:
        d = fwd_position(m, d)
        if not skipsensor:
            d = _sensor.sensor_pos(m, d)
        if energy:  # mj_energyPos, also in the sensor-less stages of RK4 (as MuJoCo)
            d = d.replace(energy=d.energy.at[0].set(_sensor.energy_pos(m, d)))
    if skipstage < Stage.VEL:
        d = fwd_velocity(m, d)
        if not skipsensor:
            d = _sensor.sensor_vel(m, d)
        if energy:
            d = d.replace(energy=d.energy.at[1].set(_sensor.energy_vel(m, d)))
    return d


def forward_skip(m: Model, d: State, skipstage: int = Stage.NONE,
                 skipsensor: bool = False) -> State:
    """Forward dynamics, skipping the stages up to `skipstage`. MuJoCo: mj_forwardSkip.

    skipstage (static): Stage.NONE runs everything, Stage.POS reuses the position stage
    already in `d`, Stage.VEL also the velocity stage. With `skipsensor` no sensor is
    computed (sensordata keeps its values).
    """
    d_in = d
    d = pos_vel_stages(m, d, skipstage, skipsensor)
    d = fwd_actuation(m, d)
    d = fwd_acceleration(m, d)
    d = fwd_constraint(m, d)
    if not skipsensor:
        d = acc_sensors(m, d)
    if _sleep.enabled(m):
        d = _sleep.hold(m, d_in, d, sensors=not skipsensor)
    return d


def forward(m: Model, d: State) -> State:
    """Forward dynamics: every derived quantity and qacc. MuJoCo: mj_forward."""
    return forward_skip(m, d, Stage.NONE)


def integrate(m: Model, d: State, rk4_as_euler: bool = False) -> State:
    """The integrator the model selects, on a state after `forward` (mj_step's second half).

    With `rk4_as_euler`, RK4 falls back to Euler (as mj_step2).
    """
    it = m.opt.integrator
    if it == Integrator.EULER or (it == Integrator.RK4 and rk4_as_euler):
        return _integrator.euler(m, d)
    if it == Integrator.RK4:
        return _integrator.rungekutta4(m, d)
    if it in (Integrator.IMPLICIT, Integrator.IMPLICITFAST):
        return _integrator.implicit(m, d)
    raise NotImplementedError(f"integrator {Integrator(it).name.lower()} is not supported")


def step(m: Model, d: State) -> State:
    """Advances the simulation by one time step. MuJoCo: mj_step.

    MuJoCo's value checks, forward, then the integrator the model selects (opt.integrator).
    A world whose qpos or qvel is bad (NaN or beyond 1e10) starts again from the reset state
    (mj_resetData; warning BADQPOS / BADQVEL counted in `state.warning`) before forward. A
    world whose qacc comes out bad is reset and returned without integrating: it is one step
    behind MuJoCo, which integrates the reset state in the same call.
    """
    d = check_pos_vel(m, d)
    if _rk4_in_one_pass(m):
        out, qacc0 = _integrator.rungekutta4(m, d, first_stage=True)
        return reset_where(m, out, _is_bad(qacc0), Warning.BADQACC)
    d = forward(m, d)
    return _integrate_unless_reset(m, d, lambda dd: integrate(m, dd))


def _rk4_in_one_pass(m: Model) -> bool:
    """RK4 models whose forward pass equals the sensor-less one of the later stages (no
    sensors, no sleeping islands), stepped with the default reset on a bad qacc and no
    fwdinv comparison: the forward pass and the three stages are one scanned pass,
    compiled once."""
    return (m.opt.integrator == Integrator.RK4 and m.nsensor == 0 and not _sleep.enabled(m)
            and not m.opt.disableflags & DisableBit.AUTORESET
            and not m.opt.enableflags & EnableBit.FWDINV)


def compare_fwd_inv(m: Model, d: State) -> State:
    """solver_fwdinv after forward: how far inverse dynamics at the same qacc is from the
    forward solution (constraint forces, and total applied plus actuator force).
    MuJoCo: mj_compareFwdInv (run by step when the fwdinv flag is enabled).

    As MuJoCo, the inverse pass leaves its own efc_state and qfrc_inverse in the state and
    restores the forward qfrc_constraint and efc_force.
    """
    from jaxsim.inverse import inverse_skip

    qforce = d.qfrc_applied + d.qfrc_actuator + xfrc_accumulate(m, d)
    inv = inverse_skip(m, d, Stage.VEL, skipsensor=True)
    fwdinv = jnp.stack([jnp.linalg.norm(d.qfrc_constraint - inv.qfrc_constraint),
                        jnp.linalg.norm(qforce - inv.qfrc_inverse)])
    if not d.efc_force.shape[0]:  # no constraints: MuJoCo reports zeros
        fwdinv = jnp.zeros_like(fwdinv)
    return inv.replace(qfrc_constraint=d.qfrc_constraint, efc_force=d.efc_force,
                       solver_fwdinv=fwdinv.astype(d.qacc.dtype))


def _integrate_unless_reset(m: Model, d: State, integrate_fn) -> State:
    """The integrated state, or, for a world whose qacc is bad, the reset state.

    Not MuJoCo's result in that case: mj_checkAcc resets the data, runs mj_forward on it,
    and mj_step then integrates the reset state, so MuJoCo returns one step from the reset
    state (time dt, qvel = dt * qacc of the initial pose), this the reset state itself
    (time 0). Matching it needs a second forward pass of the reset state, in the program
    for every step (twice the compile time, or twice the run time); left as a known
    difference (the referee's step stage on derivative/dcmotor.xml, whose LuGre actuator
    makes a random state's qacc blow up, shows it; with autoreset disabled it agrees)."""
    bad = _is_bad(d.qacc)
    if m.opt.disableflags & DisableBit.AUTORESET:
        d = check_acc(m, d)
        if m.opt.enableflags & EnableBit.FWDINV:
            d = compare_fwd_inv(m, d)
        return integrate_fn(d)
    if m.opt.enableflags & EnableBit.FWDINV:
        d = compare_fwd_inv(m, d)
    return reset_where(m, integrate_fn(d), bad, Warning.BADQACC)


def step1(m: Model, d: State) -> State:
    """First half of a step: position and velocity stages and their sensors. MuJoCo: mj_step1.

    Set ctrl, qfrc_applied or xfrc_applied on the result, then call `step2`.
    """
    return pos_vel_stages(m, check_pos_vel(m, d), Stage.NONE, skipsensor=False)


def step2(m: Model, d: State) -> State:
    """Second half of a step: actuation, acceleration, integration. MuJoCo: mj_step2.

    As MuJoCo, RK4 falls back to Euler here (the stages need the whole pipeline).
    """
    d = fwd_actuation(m, d)
    d = fwd_acceleration(m, d)
    d = acc_sensors(m, fwd_constraint(m, d))
    return _integrate_unless_reset(m, d, lambda dd: integrate(m, dd, rk4_as_euler=True))


def euler(m: Model, d: State) -> State:
    """Euler integration of a state on which `forward` has run. MuJoCo: mj_Euler."""
    return _integrator.euler(m, d)


def implicit(m: Model, d: State) -> State:
    """Implicit / implicitfast integration after `forward`. MuJoCo: mj_implicit."""
    return _integrator.implicit(m, d)


def rungekutta4(m: Model, d: State) -> State:
    """RK4 integration after `forward`. MuJoCo: mj_RungeKutta(m, d, 4)."""
    return _integrator.rungekutta4(m, d)
