"""Train a small convnet on handwritten digits: a thin wrapper of `python -m tinycore.examples.train_digits` (same flags)."""
from tinycore.examples.train_digits import main

if __name__ == "__main__": main()
