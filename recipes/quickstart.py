"""Quickstart recipe: `python recipes/quickstart.py [--epochs N] [--out DIR]`.

Trains a small ViT from scratch on scikit-learn's digits (offline), prints the backend,
the held-out test accuracy and the time, and saves `model.keras`. Same as
`keras-vit quickstart`; see `keras_vit/quickstart.py` for the settings.
"""

import sys

from keras_vit.cli import main

if __name__ == "__main__":
    sys.exit(main(["quickstart", *sys.argv[1:]]))
