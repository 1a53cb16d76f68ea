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
# # HCR confidentiality bounds for dithered features (Tygert et al.)
#
# Train the paper's MNIST feature network (Affine784x784-ReLU-Affine784x784-ReLU) and classifier, add
# Gaussian noise of 1 x RMS to the features, and compute Hammersley-Chapman-Robbins lower bounds on the
# standard deviation of *any unbiased estimator* of each DCT-II mode of the input (Algorithm 1: matrix-free
# LSQR, vmapped over examples and restarts). `RECON_JAX_SMOKE=1` picks tiny sizes.

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

from recon_jax import data
from recon_jax.bounds import dithered_accuracy, hcr_bounds_batch, rademacher_perturbation
from recon_jax.evidence.hcr_figures import plot_bound_histograms, plot_rademacher_grid
from recon_jax.mechanisms import feature_rms
from recon_jax.models import tygert
from recon_jax.training import train_classifier

SMOKE = bool(os.environ.get("RECON_JAX_SMOKE"))

# %%
epochs = 6  #@param {type:"integer"}
noise_scale = 1.0  #@param {type:"number"}
perturbation_size = 1 / 200  #@param {type:"number"}
num_examples = 16  #@param {type:"integer"}
num_restarts = 25  #@param {type:"integer"}
num_rounds = 10  #@param {type:"integer"}
width = 784
num_train = None
if SMOKE:
    epochs, num_examples, num_restarts, num_rounds, width, num_train = 1, 2, 2, 2, 32, 256

# %%
x_train, y_train = data.load_dataset("mnist", "train")
x_test, y_test = data.load_dataset("mnist", "test")
if num_train:
    x_train, y_train, x_test, y_test = x_train[:num_train], y_train[:num_train], x_test[:num_train], y_test[:num_train]
x_train, x_test = tygert.normalize_mnist(x_train), tygert.normalize_mnist(x_test)
model = tygert.MNISTFeatureNet(width=width)
params = train_classifier(model, x_train, y_train, jax.random.key(0), epochs=epochs, weight_decay=1e-2)
feature_fn, classifier_fn = tygert.feature_and_classifier_fns(model, params)

# %%
feats = jax.jit(jax.vmap(feature_fn))(x_test)
sigma = noise_scale * float(feature_rms(feats))
clean, noisy = dithered_accuracy(jax.jit(classifier_fn), feats, y_test, sigma, jax.random.key(1), num_draws=5)
print(f"sigma = {sigma:.3f}; accuracy without dithering {float(clean):.3%}, with {float(noisy):.3%} "
      "(paper: 97.9% / 95.1%)")

# %%
bounds = jax.jit(lambda xs: hcr_bounds_batch(
    feature_fn, xs, sigma, jax.random.key(2), num_restarts=num_restarts, num_rounds=num_rounds,
    perturbation_size=perturbation_size))(x_test[:num_examples])
bounds = np.asarray(bounds)
print("median lower bound on the std of a DCT mode:", np.median(bounds))
plot_bound_histograms(bounds, title=f"size {perturbation_size:.3g}", bins=64)
plt.show()

# %%
k = min(3, num_examples)
perturbed = np.stack([np.asarray(rademacher_perturbation(jax.random.key(10 + i), x_test[i], bounds[i]))
                      for i in range(k)])
plot_rademacher_grid(np.asarray(tygert.denormalize_mnist(x_test[:k])), np.asarray(tygert.denormalize_mnist(perturbed)))
plt.show()
