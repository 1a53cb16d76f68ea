"""Thin experiment entry points: ``python -m experiments.<name> --config=experiments/configs/<name>.py[:variant]``."""
