import jax
import jax.numpy as jnp
import numpy as np
import pytest

from recon_jax import data
from recon_jax.attacks import glm


def _synthetic(family, n=60, d=5, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, d))
    w = rng.standard_normal(d) * 0.5
    t = x @ w + 0.3
    if family == "linear":
        y = t + 0.5 * rng.standard_normal(n)
    elif family == "logistic":
        y = (rng.uniform(size=n) < 1 / (1 + np.exp(-t))).astype(float)
    else:
        y = rng.poisson(np.exp(0.5 * t)).astype(float)
    return x, y


@pytest.mark.parametrize("family,l2", [("linear", 0.0), ("linear", 0.7), ("logistic", 0.0), ("logistic", 0.05),
                                        ("poisson", 0.0), ("poisson", 0.2)])
def test_theorem1_exact_recovery_synthetic(x64, family, l2):
    x, y = _synthetic(family)
    fit = glm.fit_glm(x, y, family, l2=l2, tol=1e-12)
    # The fit is at optimality: its gradient vanishes (checked with an independent NumPy gradient).
    xi = np.concatenate([np.ones((len(x), 1)), x], 1)
    mean = {"linear": lambda t: t, "logistic": lambda t: 1 / (1 + np.exp(-t)), "poisson": np.exp}[family]
    theta = np.asarray(fit.theta)
    np.testing.assert_allclose(xi.T @ (mean(xi @ theta) - y) + 2 * l2 * theta, 0, atol=1e-9)
    x_hat, y_hat = glm.reconstruct_glm(fit.theta, x[1:], y[1:], family, l2=l2)
    # Solver tolerance 1e-12 on the gradient: recovery to ~1e-8 is "exact" here.
    np.testing.assert_allclose(x_hat, x[0], atol=1e-8)
    np.testing.assert_allclose(y_hat, y[0], atol=1e-8)


def test_theorem1_exact_recovery_mnist_logistic_zero_vs_one(x64):
    images, labels = data.load_dataset("mnist", "test")
    keep = np.flatnonzero(labels <= 1)[:301]
    x = images[keep].reshape(len(keep), -1).astype(np.float64)
    y = labels[keep].astype(np.float64)
    l2 = 1e-2  # separable classes: the regulariser makes the optimum unique and finite.
    fit = glm.fit_glm(x, y, "logistic", l2=l2, tol=1e-11)
    assert float(fit.grad_norm) < 1e-11
    target = 17
    mask = np.arange(len(x)) != target
    x_hat, y_hat = glm.reconstruct_glm(fit.theta, x[mask], y[mask], "logistic", l2=l2)
    np.testing.assert_allclose(x_hat, x[target], atol=1e-6)
    assert abs(float(y_hat) - y[target]) < 1e-6


def test_theorem1_singular_system_raises():
    theta = jnp.array([1.0, 2.0])
    fixed_x, fixed_y = jnp.array([[0.0], [1.0]]), jnp.array([1.0, 3.0])  # residuals exactly zero
    with pytest.raises(ValueError, match="singular"):
        glm.reconstruct_glm(theta, fixed_x, fixed_y, "linear")
    x_hat, _ = jax.jit(lambda t: glm.reconstruct_glm(t, fixed_x, fixed_y, "linear"))(theta)
    assert not np.isfinite(np.asarray(x_hat)).any()


def test_theorem8_least_squares_without_intercept(x64):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((40, 4))
    y = x @ rng.standard_normal(4) + rng.standard_normal(40)
    theta = np.linalg.lstsq(x, y, rcond=None)[0]
    candidates = glm.reconstruct_least_squares_no_intercept(theta, x[1:], y[1:], y[0])
    err = np.min(np.abs(np.asarray(candidates) - x[0]).max(axis=1))
    assert err < 1e-9
    # Both candidates satisfy the optimality condition x (x^T theta - y) = -X-^T (X- theta - Y-).
    v = x[1:].T @ (x[1:] @ theta - y[1:])
    for c in np.asarray(candidates):
        np.testing.assert_allclose(c * (c @ theta - y[0]), -v, atol=1e-8)


def test_validation():
    with pytest.raises(ValueError, match="family"):
        glm.fit_glm(np.zeros((3, 1)), np.zeros(3), "probit")
    with pytest.raises(ValueError, match="l2"):
        glm.fit_glm(np.zeros((3, 1)), np.zeros(3), "linear", l2=-1.0)
    with pytest.raises(ValueError, match="features"):
        glm.reconstruct_glm(jnp.zeros(3), jnp.zeros((4, 5)), jnp.zeros(4), "linear")
