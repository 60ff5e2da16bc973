"""`python -m keras_vit`: the same as the `keras-vit` command."""

import sys

from keras_vit.cli import main

if __name__ == "__main__":
    sys.exit(main())
