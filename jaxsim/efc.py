"""Constraint rows with fixed shapes: what constraint.py builds and solver.py consumes.

MuJoCo's mjData.efc_* arrays have one row per active constraint, in the order equality,
friction loss (dofs, then tendons), limits (joints, then tendons), contacts. Here the
number of rows `nefc` is fixed per model (the compiler's structure plus the contact
buffer): every row that could ever exist has a slot, in MuJoCo's order, and `active`
says which rows MuJoCo would have now. Inactive rows hold finite values (J = 0, D = 0,
aref = 0, ...) and contribute nothing; compacting the active rows in order gives
MuJoCo's efc arrays.

Contacts: each contact slot of `state.contact` owns a fixed block of `contact_rows[i]`
rows starting at `contact_adr[i]`, room for the largest dimension the slot's geom pair can
have (known from the model): pyramidal 2 (dim - 1) rows (1 when dim is 1), elliptic dim
rows (normal first, then the friction directions). The rows a contact actually uses are
the first ones of its block (`active` marks them).
"""

from __future__ import annotations

import jax
import numpy as np

from jaxsim.struct import Struct, leaf, static


class Efc(Struct):
    """Constraint rows (all arrays have leading dimension nefc unless said otherwise)."""

    J: jax.Array = leaf("(nefc, nv)", "constraint Jacobian; zero on inactive rows")
    pos: jax.Array = leaf("(nefc,)", "constraint position (violation), efc_pos")
    margin: jax.Array = leaf("(nefc,)", "inclusion margin, efc_margin")
    frictionloss: jax.Array = leaf("(nefc,)", "friction loss (friction rows), else 0")
    R: jax.Array = leaf("(nefc,)", "regulariser from solimp (efc_R); finite, > 0 in every row")
    D: jax.Array = leaf("(nefc,)", "1 / R on active rows, 0 on inactive rows (efc_D)")
    aref: jax.Array = leaf("(nefc,)", "reference acceleration from solref (efc_aref); 0 on "
                           "inactive rows")
    vel: jax.Array = leaf("(nefc,)", "J qvel (efc_vel)")
    type: jax.Array = leaf("(nefc,)", "int32 ConstraintType (types.ConstraintType)")
    id: jax.Array = leaf("(nefc,)", "int32 id of the object (equality, dof, joint, tendon, contact)")
    active: jax.Array = leaf("(nefc,)", "bool: the row exists in MuJoCo now")
    contact_dim: jax.Array = leaf("(ncon,)", "int32 condim in use (0 if the contact has no rows)")
    contact_mu: jax.Array = leaf(
        "(ncon,)", "friction[0] * sqrt(1 / impratio); 0 for frictionless contacts or no rows")
    contact_friction: jax.Array = leaf("(ncon, 5)", "friction of each contact")
    contact_adr: np.ndarray = static("(ncon,)", "first row of each contact's block")
    contact_nrow: int = static("()", "rows of the widest contact block")
    contact_rows: np.ndarray | None = static(
        "(ncon,)", "rows of each contact's block (None: contact_nrow for every contact)",
        default=None)

    def _replace(self, **changes):
        return self.replace(**changes)
