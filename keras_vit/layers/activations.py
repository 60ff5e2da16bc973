"""The MLP activations of the ViT families: GELU (tanh or exact) and CLIP's QuickGELU."""

from keras import ops

__all__ = ["quick_gelu"]

ACTIVATIONS = ("gelu", "quick_gelu")


def check_activation(activation):
    """Returns `activation` if it is one of `ACTIVATIONS`, else raises a `ValueError`."""
    if activation not in ACTIVATIONS:
        raise ValueError(
            f"activation must be one of {ACTIVATIONS}. Received: activation={activation!r}"
        )
    return activation


def quick_gelu(x):
    """CLIP's QuickGELU, `x * sigmoid(1.702 * x)` (timm `QuickGELU`).

    Example:

    >>> import numpy as np
    >>> [round(float(v), 4) for v in ops.convert_to_numpy(quick_gelu(np.array([0.0, 1.0])))]
    [0.0, 0.8458]
    """
    x = ops.convert_to_tensor(x)
    return x * ops.sigmoid(ops.cast(1.702, x.dtype) * x)


def mlp_activation(x, activation="gelu", approximate_gelu=True):
    """The MLP activation: `"gelu"` (tanh form when `approximate_gelu`) or `"quick_gelu"`."""
    if activation == "quick_gelu":
        return quick_gelu(x)
    check_activation(activation)
    return ops.gelu(x, approximate=approximate_gelu)
