"""What the masked pre-training models' `compute_loss` share (`mae`, `mpp`)."""

from keras import ops


def weighted_patches(weights, sample_weight):
    """Per-patch loss weights `(B, N)` times per-image `sample_weight`, and the batch's scale.

    As in Keras' losses (a weighted sum divided by the batch size) the batch's loss is scaled by
    the mean image weight: images of weight 0 (the padding of a multi-process evaluation) drop
    out, and weights of 1 change nothing. Without `sample_weight`: `(weights, 1.0)`.
    """
    if sample_weight is None:
        return weights, 1.0
    sample_weight = ops.reshape(ops.cast(sample_weight, "float32"), (-1,))
    return ops.cast(weights, "float32") * sample_weight[:, None], ops.mean(sample_weight)


def with_layer_losses(model, loss):
    """`loss` plus the model's own `losses` (regularisers), in `loss`'s dtype."""
    for extra in model.losses:
        loss = loss + ops.cast(extra, loss.dtype)
    return loss
