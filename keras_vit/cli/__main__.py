"""`python -m keras_vit.cli`: the same as `keras-vit`."""

import sys

from keras_vit.cli import main

if __name__ == "__main__":
    sys.exit(main())
