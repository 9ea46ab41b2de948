"""Runnable examples shipped with the package: `python -m tinycore.examples.train_digits`."""
