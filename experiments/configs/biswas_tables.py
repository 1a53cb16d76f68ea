"""Config for experiments.biswas_tables: Biswas et al. Table I (VMF approach 1 vs 2) and Table IV (eps <-> kappa <-> sigma)."""

import ml_collections

from recon_jax.evidence.config_checks import integer, number

VARIANTS = ("smoke", "default", "paper")

# Allowed values of the fields a user sets, checked before the run writes anything (experiments.common.check_config).
CHECKS = {
    "dim": integer(at_least=2),
    "dataset_size": integer(at_least=1),
    "batch_size": integer(at_least=1, at_most="dataset_size"),
    "epochs": integer(at_least=1),
    "delta": number(above=0, below=1),
    "curve_points": integer(at_least=2),
    "pld_discretization": number(above=0),
    "reproduce_within_pct": number(above=0),
}

# Paper values (Biswas et al., Table I and Appendix C Table IV), used only as the reference column.
TABLE_I = ((25, 0.0139, 1), (50, 0.0867, 1), (75, 0.49, 1), (100, 2.5, 2), (125, 4.6, 2), (150, 7.97, 2),
           (200, 10.9, 2), (300, 41.02, 2))
TABLE_IV_EPS = (0.49, 2.48, 4.59, 7.97, 9.72, 10.9, 17.25, 27.38, 38.84, 41.02, 64.98, 79.68, 95.44, 112.28, 173.0)
TABLE_IV_KAPPA = (75, 100, 125, 150, 175, 200, 225, 250, 275, 300, 325, 350, 375, 400, 500)
TABLE_IV_SIGMA = (1.23, 0.660, 0.544, 0.461, 0.435, 0.420, 0.367, 0.321, 0.287, 0.282, 0.245, 0.229, 0.214, 0.204, 0.174)


def get_config(variant: str = "default") -> ml_collections.ConfigDict:
    c = ml_collections.ConfigDict()
    c.variant = variant
    c.dim = 13700  # p: gradient size of the paper's model
    c.dataset_size = 60000
    c.batch_size = 128  # q = batch_size / dataset_size
    c.epochs = 3  # the paper's N (it composes over epochs)
    c.delta = 1.0 / 60000
    c.table_i = TABLE_I
    c.table_iv_eps = TABLE_IV_EPS
    c.table_iv_kappa = TABLE_IV_KAPPA
    c.table_iv_sigma = TABLE_IV_SIGMA
    c.calibrate = True  # also invert: paper eps -> kappa and paper eps -> sigma
    c.step_composition = True  # also the correct DP-SGD count: compose VMF over epochs / q steps
    c.curve_points = 32  # kappa grid for the figure
    c.pld = True  # tight accounting over steps: VMF privacy loss distribution, Gaussian PLD (dp_accounting)
    c.pld_discretization = 1e-3
    # Claims' tolerance, fixed before the run: the paper prints eps to 2-4 significant figures from its own
    # numerical integration, so a cell counts as reproduced within 2% of it. Approach 1 has no tolerance: our
    # optimiser is exact and the paper's a grid search, so ours may be lower but never higher. (Until
    # 2026-11-26 that claim also bounded how much lower, by 3.5%, a number chosen after -3.14% had been seen.)
    c.reproduce_within_pct = 2.0
    if variant == "smoke":
        c.calibrate = False
        c.step_composition = False
        c.pld = False
    elif variant not in ("default", "paper"):
        raise ValueError(f"unknown variant {variant!r}; choose smoke, default or paper")
    c.lock()
    return c
