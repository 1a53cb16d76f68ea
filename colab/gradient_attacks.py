# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Gradient attacks under DP-SGD: Ziller's linear-layer attack, Inverting Gradients, Gaussian vs VMF
#
# Thin tour of `recon_jax.attacks.gradient` and `recon_jax.mechanisms`:
# 1. the von Mises-Fisher sampler (Wood 1994) used by Biswas et al.'s VMF mechanism;
# 2. Ziller et al.'s linear-layer attack: the released DP-SGD gradient *is* the reconstruction, and its MSE sits on
#    the bound `C^2 sigma^2 / T` when the image is not clipped;
# 3. Inverting Gradients (Geiping et al.) on Biswas et al.'s 13,700-parameter MLP, without noise, with Gaussian
#    noise and with VMF noise.

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

from recon_jax import data, metrics, models, training
from recon_jax.attacks import gradient as ga
from recon_jax.mechanisms import GaussianMechanism, NoNoise, VMFMechanism, sample_vmf_cosine

SMOKE = os.environ.get("RECON_JAX_SMOKE") == "1"
num_images = 4  #@param {type:"integer"}
ig_steps = 30 if SMOKE else 1000  #@param {type:"integer"}
ig_restarts = 1 if SMOKE else 4  #@param {type:"integer"}
seed = 0  #@param {type:"integer"}
key = jax.random.key(seed)

# %% [markdown]
# ## 1. The VMF sampler: the cosine `mu^T x` concentrates as kappa grows (d = 13,700, the MLP's size)

# %%
dim = 13700
fig, ax = plt.subplots(figsize=(6, 3))
for i, kappa in enumerate([75.0, 500.0, 5000.0, 50000.0]):
    w, _ = sample_vmf_cosine(jax.random.fold_in(key, i), kappa, dim, shape=(200 if SMOKE else 2000,))
    ax.hist(np.asarray(w), bins=40, alpha=0.6, label=f"kappa={kappa:g}")
ax.set_xlabel("mu^T x")
ax.legend()
plt.show()

# %% [markdown]
# ## 2. Ziller et al.'s linear-layer attack on MNIST digits

# %%
images, labels = data.load_dataset("mnist", "test")
x = jnp.asarray(images[:num_images])
clip_norm = 20.0  # >= ||X|| for MNIST digits: no clipping, the MSE bound is tight
rows = []
for sigma in [0.001, 0.01, 0.05]:
    obs = ga.linear_layer_observations(jax.random.fold_in(key, 10), x, GaussianMechanism(noise_multiplier=sigma),
                                       clip_norm, steps=1)
    rec = ga.linear_layer_attack(obs, num_images, x.shape[1:])
    rows.append((sigma, rec))
    print(f"sigma={sigma}: mean MSE {float(jnp.mean(metrics.mse(x, rec))):.3g}, bound C^2 sigma^2 = "
          f"{clip_norm**2 * sigma**2:.3g}, mean NCC {float(jnp.mean(metrics.ncc(x, rec))):.3f}")
fig, axes = plt.subplots(len(rows) + 1, num_images, figsize=(1.6 * num_images, 1.6 * (len(rows) + 1)))
for j in range(num_images):
    axes[0, j].imshow(x[j, ..., 0], cmap="gray", vmin=0, vmax=1)
    for i, (sigma, rec) in enumerate(rows):
        axes[i + 1, j].imshow(np.clip(rec[j, ..., 0], 0, 1), cmap="gray", vmin=0, vmax=1)
        axes[i + 1, 0].set_ylabel(f"sigma={sigma}")
for a in axes.ravel():
    a.set_xticks([]), a.set_yticks([])
plt.show()

# %% [markdown]
# ## 3. Inverting Gradients on Biswas et al.'s MLP (16x16 centre crops, batch 1, iDLG labels)

# %%
fns = models.from_flax(models.biswas_mlp())
x16 = jnp.asarray(images[:1, 6:22, 6:22, :])
y16 = jnp.asarray(labels[:1])
params = training.initial_params(fns, jax.random.fold_in(key, 20), x16)
mechs = {"no noise (clipped)": NoNoise(), "Gaussian sigma=0.01": GaussianMechanism(noise_multiplier=0.01),
         "VMF kappa=5e5": VMFMechanism(kappa=5e5), "VMF kappa=500": VMFMechanism(kappa=500.0)}
recs = {}
for i, (name, mech) in enumerate(mechs.items()):
    g = training.privatized_gradient(fns, params, x16, y16, jax.random.fold_in(key, 30 + i), clip_norm=1.0,
                                     mechanism=mech)
    res = ga.inverting_gradients(jax.random.fold_in(key, 40 + i), fns.apply, params, g, (16, 16, 1),
                                 ga.InvertingGradientsOptions(num_restarts=ig_restarts, num_steps=ig_steps),
                                 clip_norm=1.0)
    recs[name] = res.reconstruction
    print(f"{name}: inferred label {int(res.labels[0])} (true {int(y16[0])}), "
          f"PSNR {float(metrics.psnr(x16, res.reconstruction)[0]):.1f} dB")
fig, axes = plt.subplots(1, len(recs) + 1, figsize=(2 * (len(recs) + 1), 2.2))
axes[0].imshow(x16[0, ..., 0], cmap="gray", vmin=0, vmax=1)
axes[0].set_title("original", fontsize=8)
for a, (name, r) in zip(axes[1:], recs.items()):
    a.imshow(r[0, ..., 0], cmap="gray", vmin=0, vmax=1)
    a.set_title(name, fontsize=8)
for a in axes:
    a.set_xticks([]), a.set_yticks([])
plt.show()
