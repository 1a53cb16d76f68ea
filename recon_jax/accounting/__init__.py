"""Jittable privacy accounting (RDP curves, subsampling, conversions, composition, calibration; PLD bridge)."""
