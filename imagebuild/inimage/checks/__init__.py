"""The validation checks, one module per check (CHECK_NAMES; each has ``run(ctx)``)."""
