"""Model families: one folder each, registered in `keras_vit.weights.registry`.

A family's folder holds what only that family knows: its timm name patterns and checkpoint
layout, its Hugging Face readers, its defaults. Every sub-package here is a family: the
registry imports them all (in name order) the first time it is read, and each registers
itself; nothing lists them. docs/adding_a_family.md walks through adding one.
"""

from keras_vit import _plugins

# The family folders, found (not listed): the sub-packages of this package, in name order.
FAMILY_FOLDERS = _plugins.subpackages(__name__)

__all__ = ["FAMILY_FOLDERS"]
