"""Constraint rows with fixed shapes: what constraint.py builds and solver.py consumes.

MuJoCo's mjData.efc_* arrays have one row per active constraint, in the order equality,
friction loss (dofs, then tendons), limits (joints, then tendons), contacts. Here the
number of rows `nefc` is fixed per model (the compiler's structure plus the contact
buffer): every row that could ever exist has a slot, in MuJoCo's order, and `active`
says which rows MuJoCo would have now. Inactive rows hold finite values (J = 0, D = 0,
aref = 0, ...) and contribute nothing; compacting the active rows in order gives
MuJoCo's efc arrays.

Contacts: each contact slot of `state.contact` owns a fixed block of rows starting at
`contact_adr[i]` with room for its largest possible dimension: pyramidal 2 (dim - 1)
rows (1 when dim is 1), elliptic dim rows (normal first, then the friction directions).
The rows a contact actually uses are the first ones of its block (`active` marks them).
"""

from __future__ import annotations

from typing import NamedTuple

import jax


class Efc(NamedTuple):
    """Constraint rows (all arrays have leading dimension nefc unless said otherwise)."""

    J: jax.Array  # (nefc, nv) constraint Jacobian
    pos: jax.Array  # (nefc,) constraint position (violation), MuJoCo's efc_pos
    margin: jax.Array  # (nefc,) inclusion margin, efc_margin
    frictionloss: jax.Array  # (nefc,) friction loss (friction rows), else 0
    R: jax.Array  # (nefc,) regulariser from solimp (efc_R); finite and > 0 in every row
    D: jax.Array  # (nefc,) 1 / R on active rows, 0 on inactive rows (efc_D)
    aref: jax.Array  # (nefc,) reference acceleration from solref (efc_aref)
    vel: jax.Array  # (nefc,) J qvel (efc_vel)
    type: jax.Array  # (nefc,) int32 ConstraintType (types.ConstraintType)
    id: jax.Array  # (nefc,) int32 id of the object (equality, dof, joint, tendon, contact)
    active: jax.Array  # (nefc,) bool: the row exists in MuJoCo now
    # contact structure (ncon = contact buffer size)
    contact_adr: jax.Array  # (ncon,) int32 first row of each contact's block (static)
    contact_nrow: int  # rows per contact block (static, the same for every contact)
    contact_dim: jax.Array  # (ncon,) int32 condim in use (0 if the contact has no rows)
    contact_mu: jax.Array  # (ncon,) friction[0] (the cone's slope; elliptic: scaled)
    contact_friction: jax.Array  # (ncon, 5)
