"""Config for experiments.glm_attack: Balle et al. Thm 1 against logistic regression on the embedded MNIST."""

import ml_collections


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
