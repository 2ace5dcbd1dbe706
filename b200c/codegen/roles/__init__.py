"""One module per warp role; each builds that role's RoleIR from the plan.
A blog stage's change lives in the role(s) it touches (see each module)."""
