"""Reports: matplotlib figures and Markdown tables; the reconstruction-risk report (:mod:`.risk_report`, the
``recon-jax-report`` console script) and the evidence helpers of every run (:mod:`.evidence`: provenance, claims,
NaN refusal, keyed caches, publishing)."""

from recon_jax.report.markdown import format_value, markdown_table
from recon_jax.report.plots import histogram_vs_reference, image_grid

__all__ = ["format_value", "markdown_table", "histogram_vs_reference", "image_grid"]
