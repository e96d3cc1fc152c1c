"""Rounds over a run: screening, adaptive repeats, the referee, agreement."""
