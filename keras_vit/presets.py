"""Compatibility alias: `keras_vit.presets` is the module `keras_vit.weights.presets`.

The module object itself is registered under this name, so that
`keras_vit.presets.X` (and patching it) reaches the same object as
`keras_vit.weights.presets.X`. New code imports `keras_vit.weights.presets`.
"""

import sys

from keras_vit.weights import presets as _module

sys.modules[__name__] = _module
