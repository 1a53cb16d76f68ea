"""Performance scripts: each prints ratios against a baseline measured side by side in the same process."""
