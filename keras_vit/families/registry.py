"""The family registry, as the family folders import it (`register`, `ModelFamily`).

The registry itself lives in `keras_vit.weights.registry`, below the families: the shared
loaders read it and never import a family folder, so the package stack stays one way
(`weights` < `families`).
"""

from keras_vit.weights.registry import *  # noqa: F403
from keras_vit.weights.registry import __all__  # noqa: F401
