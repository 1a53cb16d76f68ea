"""Noise mechanisms for DP-GD / DP-SGD (Gaussian; von Mises-Fisher in :mod:`recon_jax.mechanisms.vmf`)."""

from recon_jax.mechanisms.base import GaussianMechanism, Mechanism, NoNoise
from recon_jax.mechanisms.vmf import VMFMechanism, sample_vmf, sample_vmf_cosine

__all__ = ["Mechanism", "GaussianMechanism", "NoNoise", "VMFMechanism", "sample_vmf", "sample_vmf_cosine"]
