"""Config for experiments.glm_attack: Balle et al. Thm 1 against logistic regression on the embedded MNIST."""

import ml_collections

from experiments.configs.shared_checks import CLAIMS, SEED
from recon_jax.evidence.config_checks import each, integer, number, one_of

VARIANTS = ("smoke", "default", "paper")

# Allowed values of the fields a user sets, checked before the run writes anything (experiments.common.check_config).
CHECKS = {
    **SEED,
    "dataset": one_of("mnist", "tfds:mnist", "tfds:fashion_mnist", "tfds:cifar10"),  # ten classes
    "positive_digits": each(integer(at_least=0, at_most=9)),
    "fixed_size": integer(at_least=1),
    "num_targets": integer(at_least=1),
    "l2": number(at_least=0),
    "solver_tols": each(number(above=0)),
    "max_newton_iters": integer(at_least=1),
    "exact_mse": number(above=0),
    **CLAIMS,
}


def get_config(variant: str = "default") -> ml_collections.ConfigDict:
    c = ml_collections.ConfigDict()
    c.variant = variant
    c.seed = 0
    c.dataset = "mnist"
    c.positive_digits = (0, 2, 4, 6, 8)  # label 1 = even digit
    c.fixed_size = 1000  # |D-|
    c.num_targets = 16
    c.l2 = 1e-2  # objective: summed logistic loss + l2 * ||theta||^2
    c.solver_tols = (1e-10, 1e-4, 1e-1)  # released models trained to these gradient norms
    c.max_newton_iters = 100
    # Claims, fixed before the run. "Recovered exactly" means a mean MSE at most exact_mse: pixels lie in [0, 1],
    # and 1e-6 is an RMS error of 1e-3, a quarter of one 8-bit grey level (the threshold these claims used before
    # verdicts existed). "MSE grows with the solver tolerance" is decided per pair of neighbouring tolerances by a
    # one-sided paired t-test over the targets at claim_alpha divided among the pairs (Bonferroni).
    c.exact_mse = 1e-6
    c.claim_alpha = 0.05
    if variant == "smoke":
        c.fixed_size = 100
        c.num_targets = 4
        c.solver_tols = (1e-10, 1e-2)
    elif variant == "paper":
        c.fixed_size = 5000
        c.num_targets = 100
    elif variant != "default":
        raise ValueError(f"unknown variant {variant!r}; choose smoke, default or paper")
    c.lock()
    return c
