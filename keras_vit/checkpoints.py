"""Compatibility alias: `keras_vit.checkpoints` is the module `keras_vit.weights.npz`.

The module object itself is registered under this name, so that
`keras_vit.checkpoints.X` (and patching it) reaches the same object as
`keras_vit.weights.npz.X`. New code imports `keras_vit.weights.npz`.
"""

import sys

from keras_vit.weights import npz as _module

sys.modules[__name__] = _module
