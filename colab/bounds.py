# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Analytic reconstruction bounds against the noise multiplier
#
# Every bound in `recon_jax.bounds` for DP-SGD with clip norm C, noise multiplier sigma, T full-batch steps and data
# dimension N: Ziller et al.'s prior-free bounds (expected MSE / PSNR / NCC and their ReRo forms), the worst-case
# (GDP) success of Hayes et al. / Kaissis et al., Balle et al.'s ReRo from RDP and zCDP for a Gaussian prior, and
# Biswas et al.'s Bayes' capacity. All are jittable `jnp` functions evaluated on a whole sigma grid at once.
# `RECON_JAX_SMOKE=1` picks a coarse grid.

# %%
# Install recon_jax where it is missing (Colab: from the repository; set REPO to your copy or fork, a branch
# with @name). In a checkout with the package installed (`make install`, CI) this cell does nothing.
REPO = "https://github.com/YOUR-ORG/recon_jax"  # @param {type:"string"}
import importlib.util
import subprocess
import sys

if importlib.util.find_spec("recon_jax") is None:
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", f"recon-jax @ git+{REPO}"], check=True)

# %%
import os

import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np

from recon_jax import bounds

jax.config.update("jax_enable_x64", True)
SMOKE = os.environ.get("RECON_JAX_SMOKE") == "1"

# %%
clip_norm = 1.0  # @param {type:"number"}
dim = 784  # @param {type:"integer"}
steps = 1  # @param {type:"integer"}
kappa = 0.1  # @param {type:"number"}
mse_threshold = 0.05  # @param {type:"number"}
num_sigmas = 12 if SMOKE else 200

sigma = jnp.geomspace(1e-2, 1e2, num_sigmas)

# %% [markdown]
# ## Prior-free bounds (Ziller et al.)

# %%
fig, ax = plt.subplots(1, 3, figsize=(14, 3.6))
ax[0].loglog(sigma, bounds.mse_lower_bound(sigma, clip_norm, steps), label="min E[MSE]")
ax[0].axhline(mse_threshold, color="gray", ls=":", label="MSE threshold")
ax[1].semilogx(sigma, bounds.psnr_upper_bound(sigma, clip_norm, 1.0, steps), label="max E[PSNR] (dB)")
ax[2].semilogx(sigma, bounds.ncc_upper_bound(sigma, dim, steps), label=f"max E[NCC], N={dim}")
ax[2].semilogx(sigma, bounds.ncc_upper_bound_dimension_free(sigma, steps), label="max E[NCC], dimension-free")
ax[2].semilogx(sigma, bounds.rero_mse(mse_threshold, sigma, clip_norm, dim, steps), label="P[MSE <= threshold]")
ax[2].semilogx(sigma, bounds.worst_case_success(kappa, sigma, steps), label=f"worst case, kappa={kappa}")
for a in ax:
    a.set_xlabel("noise multiplier sigma")
    a.legend(fontsize=7)
plt.tight_layout()
plt.show()

# %% [markdown]
# ## ReRo for a Gaussian prior (Balle et al.) by route
#
# kappa is the exact baseline for a prior N(w, s^2 I_N) and an l2 error threshold; the Gaussian mechanism is
# rho-zCDP with rho = T / (2 sigma^2), (alpha, alpha rho)-RDP, and sqrt(T)/sigma-GDP.

# %%
prior_std = 0.3  # @param {type:"number"}
l2_threshold = 0.25 * float(np.sqrt(dim)) * prior_std  # @param
kappa_prior = bounds.baseline_kappa_gaussian(l2_threshold, prior_std, dim)
kappa_prior = jnp.clip(kappa_prior, 1e-300, 1 - 1e-16)
orders = jnp.geomspace(1.01, 256.0, 100)
rho = steps / (2 * sigma**2)
routes = {
    "RDP curve (optimal conversion)": bounds.rero_from_rdp_curve(kappa_prior, orders, orders * rho[:, None]),
    "zCDP (optimal conversion)": bounds.rero_from_zcdp(kappa_prior, rho),
    "GDP (Hayes/Kaissis)": bounds.rero_gdp(kappa_prior, jnp.sqrt(steps) / sigma),
}
print(f"baseline kappa = {float(kappa_prior):.3e}")
plt.figure(figsize=(5, 3.6))
for name, vals in routes.items():
    plt.loglog(sigma, vals, label=name)
plt.xlabel("noise multiplier sigma")
plt.ylabel("ReRo gamma")
plt.legend(fontsize=7)
plt.show()

# %% [markdown]
# ## Bayes' capacity (Biswas et al., Thm. 5) of the Gaussian channel, in nats

# %%
plt.figure(figsize=(5, 3.6))
plt.loglog(sigma, bounds.log_bayes_capacity_gaussian(sigma, dim), label=f"Gaussian, p={dim}")
plt.xlabel("noise std sigma (clip radius 1)")
plt.ylabel("log Bayes' capacity")
plt.legend(fontsize=7)
plt.show()
