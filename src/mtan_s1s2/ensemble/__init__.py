"""Ensembles of trained runs: their probabilities averaged (eval.py, predict.py, the sweep summary)."""
