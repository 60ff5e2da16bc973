"""Model families: one folder each, registered in `keras_vit.weights.registry`.

A family's folder holds what only that family knows: its timm name patterns and checkpoint
layout, its Hugging Face readers, its defaults. Importing this package imports every family
folder listed in `FAMILY_FOLDERS` (in this order, which is the order timm names are matched
in); each registers itself. docs/adding_a_family.md walks through adding one.
"""

import importlib

from keras_vit.weights.registry import ModelFamily, mark_complete, register, registered

# The family folders, in registration order.
FAMILY_FOLDERS = (
    "vit",
    "naflex",
    "stems",
    "eva",
    "aimv2",
    "parallel",
    "pe",
    "beit",
    "radio",
    "vlm",
    "dinov2",
    "mae",
    "gemma4",
)

for _folder in FAMILY_FOLDERS:
    importlib.import_module(f"keras_vit.families.{_folder}")
mark_complete()

__all__ = ["FAMILY_FOLDERS", "ModelFamily", "register", "registered"]
