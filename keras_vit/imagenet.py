"""Compatibility alias: `keras_vit.imagenet` is the module `keras_vit.weights.imagenet`.

The module object itself is registered under this name, so that
`keras_vit.imagenet.X` (and patching it) reaches the same object as
`keras_vit.weights.imagenet.X`. New code imports `keras_vit.weights.imagenet`.
"""

import sys

from keras_vit.weights import imagenet as _module

sys.modules[__name__] = _module
