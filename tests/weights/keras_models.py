"""Tiny keras_vit models with random weights, for the export tests (timm and transformers)."""

import numpy as np


def perturbed(model, seed=0):
    """Every weight random: norm scales and LayerScale around 1, everything else around 0."""
    rng = np.random.default_rng(seed)
    for variable in model.weights:
        around_one = variable.path.endswith(("gamma", "_scale"))
        noise = 0.2 * rng.standard_normal(variable.shape).astype("float32")
        variable.assign(noise + 1.0 if around_one else noise)
    return model


def images_for(model, size=None, seed=6):
    """Two random images in [-1, 1] of the model's input shape (or `size`, dynamic models)."""
    _, height, width, channels = model.input_shape
    height, width = size or (height, width)
    shape = (2, height, width, channels)
    return np.random.default_rng(seed).uniform(-1, 1, shape).astype("float32")
