"""Noise mechanisms: Gaussian (DP-GD / DP-SGD), von Mises-Fisher (:mod:`recon_jax.mechanisms.vmf`) and the
Gaussian dithering of released features (:mod:`recon_jax.mechanisms.dithering`, Tygert et al.)."""

from recon_jax.mechanisms.base import GaussianMechanism, Mechanism, NoNoise
from recon_jax.mechanisms.dithering import dither, feature_rms
from recon_jax.mechanisms.vmf import VMFMechanism, sample_vmf, sample_vmf_cosine

__all__ = ["Mechanism", "GaussianMechanism", "NoNoise", "VMFMechanism", "sample_vmf", "sample_vmf_cosine", "dither",
           "feature_rms"]
