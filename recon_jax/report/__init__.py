"""Report helpers: matplotlib figures and Markdown tables used by the experiments."""

from recon_jax.report.markdown import format_value, markdown_table
from recon_jax.report.plots import histogram_vs_reference, image_grid

__all__ = ["format_value", "markdown_table", "histogram_vs_reference", "image_grid"]
