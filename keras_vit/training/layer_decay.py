"""Layer-wise learning-rate decay (BEiT, MAE, timm `--layer-decay`) on Keras' own optimizers.

The convention (BEiT's, timm's `param_groups_layer_decay`): with `L` transformer blocks and a
decay rate `d`, depth 0 is everything before the first block (a hybrid's stem, the patch
projection, class / distillation / register tokens, the position embedding and a `pre_norm`),
block `i` (0-based) is depth `i + 1`, and everything after the last block (the final norm,
pooling, `fc_norm`, pre-logits, the heads) is depth `L + 1`. A variable at depth `k` trains at
`learning_rate * d ** (L + 1 - k)`: the head at the full rate, the last block at `d`, the first
block at `d ** L`, the embeddings at `d ** (L + 1)`.

Weight decay (decoupled, AdamW's) is off for norms, biases (every variable with fewer than two
dimensions), and the patch encoder's tokens and position embedding (everything in it but the
projection kernel), as timm and BEiT do; where it is on it is scaled by the same multiplier as
the learning rate (timm applies a group's weight decay at that group's rate).

The optimizers are Keras' `AdamW`, `Adam` and `SGD` with one change: `update_step` receives the
learning rate times the variable's multiplier (so Adam's moments are those of the unscaled
gradient, as with a per-group rate in PyTorch; scaling gradients would be wrong for Adam). The
multipliers are kept by variable path in the optimizer's config, so a `.keras` file holding the
optimizer loads with them and a backup's optimizer state restores into a rebuilt one.
"""

import keras
from keras import ops

from keras_vit.layers import EncoderBlock, PatchEncoder
from keras_vit.training.settings import check_decay  # its one home (re-exported)


def _blocks(model):
    """The model's transformer blocks, first to last: its `blocks` role, else by layer type."""
    blocks = getattr(model, "blocks", None)
    if blocks is None:  # functional models built before the model class: layers in graph order
        blocks = [layer for layer in model.layers if isinstance(layer, EncoderBlock)]
    if not blocks:
        raise ValueError(
            "Layer-wise learning-rate decay needs a ViT with transformer blocks. "
            f"Received: model {model.name!r} with none"
        )
    return list(blocks)


def _patch_encoder(model):
    encoder = getattr(model, "patch_encoder", None)
    if encoder is None:
        found = [layer for layer in model.layers if isinstance(layer, PatchEncoder)]
        encoder = found[0] if found else None
    return encoder


def layer_depths(model):
    """`{variable.path: depth}` of the trainable variables of a ViT (see the module docstring).

    Depth 0: before the first block; `i + 1`: block `i`; `L + 1`: after the last block. The
    blocks come from the model's `blocks` role; the other layers are placed by their position
    in the model's (topologically ordered) layer list relative to the blocks.

    Example:

    >>> import keras_vit
    >>> depths = layer_depths(keras_vit.ViT("mu/8", image_size=16, num_layers=2, num_classes=3))
    >>> sorted(set(depths.values()))
    [0, 1, 2, 3]
    """
    from keras_vit.models.flexi import FlexiViT

    if isinstance(model, FlexiViT):  # one set of weights: the backbone's
        model = model.backbone
    blocks = _blocks(model)
    num = len(blocks)
    block_depth = {id(block): i + 1 for i, block in enumerate(blocks)}
    order = [id(layer) for layer in model.layers]
    first = min(order.index(id(b)) for b in blocks)
    depths = {}
    for position, layer in enumerate(model.layers):
        if id(layer) in block_depth:
            depth = block_depth[id(layer)]
        else:
            depth = 0 if position < first else num + 1
        for variable in layer.trainable_weights:
            depths.setdefault(variable.path, depth)
    return depths


def layer_decay_multipliers(model, decay):
    """`{variable.path: decay ** (L + 1 - depth)}` for the trainable variables of a ViT.

    Args:
        model: a ViT (`keras_vit.ViT` and friends).
        decay: float in (0, 1]. The per-block decay rate (BEiT fine-tunes at 0.65-0.75).

    Returns:
        dict from variable path to learning-rate multiplier.
    """
    check_decay(decay)
    depths = layer_depths(model)
    top = max(depths.values())
    return {path: float(decay) ** (top - depth) for path, depth in depths.items()}


def no_weight_decay_paths(model):
    """Paths of the variables trained without weight decay: norms, biases, tokens, positions.

    Every trainable variable with fewer than two dimensions, and every variable of the patch
    encoder but its projection `kernel` (class, distillation, register and mask tokens, the
    position embedding).
    """
    from keras_vit.models.flexi import FlexiViT

    if isinstance(model, FlexiViT):
        model = model.backbone
    paths = {v.path for v in model.trainable_variables if len(v.shape) < 2}
    encoder = _patch_encoder(model)
    if encoder is not None:
        kernel = getattr(encoder, "kernel", None)
        paths.update(v.path for v in encoder.trainable_weights if v is not kernel)
    return sorted(paths)


class _PerVariableRate:
    """Mixin: per-variable learning-rate multipliers and weight-decay switches (by path)."""

    def __init__(self, *args, lr_multipliers=None, no_weight_decay=(), **kwargs):
        super().__init__(*args, **kwargs)
        self.lr_multipliers = dict(lr_multipliers or {})
        self.no_weight_decay = sorted(no_weight_decay)

    def build(self, variables):
        super().build(variables)
        skip = set(self.no_weight_decay)
        self._scales = [self.lr_multipliers.get(v.path, 1.0) for v in variables]
        self._decays = [v.path not in skip for v in variables]

    def _apply_weight_decay(self, variables):
        """Applied per variable in `update_step` instead, at the variable's own rate."""

    def update_step(self, gradient, variable, learning_rate):
        index = self._get_variable_index(variable)
        scale = self._scales[index]
        learning_rate = ops.multiply(ops.cast(learning_rate, variable.dtype), scale)
        if self.weight_decay and self._decays[index]:
            wd = ops.cast(self.weight_decay, variable.dtype)
            self.assign_sub(variable, ops.multiply(variable, ops.multiply(wd, learning_rate)))
        super().update_step(gradient, variable, learning_rate)

    def get_config(self):
        return dict(
            super().get_config(),
            lr_multipliers=dict(self.lr_multipliers),
            no_weight_decay=list(self.no_weight_decay),
        )


@keras.saving.register_keras_serializable(package="keras_vit")
class LayerDecayAdamW(_PerVariableRate, keras.optimizers.AdamW):
    """`keras.optimizers.AdamW` with per-variable rates (see `with_layer_decay`)."""


@keras.saving.register_keras_serializable(package="keras_vit")
class LayerDecayAdam(_PerVariableRate, keras.optimizers.Adam):
    """`keras.optimizers.Adam` with per-variable rates (see `with_layer_decay`)."""


@keras.saving.register_keras_serializable(package="keras_vit")
class LayerDecaySGD(_PerVariableRate, keras.optimizers.SGD):
    """`keras.optimizers.SGD` with per-variable rates (see `with_layer_decay`)."""


_CLASSES = {
    keras.optimizers.AdamW: LayerDecayAdamW,
    keras.optimizers.Adam: LayerDecayAdam,
    keras.optimizers.SGD: LayerDecaySGD,
}


def with_layer_decay(optimizer, model, decay):
    """`optimizer` rebuilt with layer-wise learning-rate decay over `model`'s blocks.

    Variable `v` at depth `k` of `L` blocks trains at `learning_rate * decay ** (L + 1 - k)`
    (the head at the full rate, block `i` at `decay ** (L - i)`, the embeddings at
    `decay ** (L + 1)`; see the module docstring), with any schedule of `optimizer`. Weight
    decay is off for norms, biases, tokens and the position embedding.

    Args:
        optimizer: an unbuilt `keras.optimizers.AdamW`, `Adam` or `SGD` (what
            `keras_vit.training.build_optimizer` returns), its settings kept.
        model: the ViT it will train.
        decay: float in (0, 1]. 1 keeps every rate (and only switches weight decay off where
            timm does).

    Returns:
        A `LayerDecayAdamW`, `LayerDecayAdam` or `LayerDecaySGD`.

    Example:

    >>> import keras_vit
    >>> model = keras_vit.ViT("mu/8", image_size=16, num_layers=2, num_classes=3)
    >>> opt = with_layer_decay(keras.optimizers.SGD(0.1), model, 0.5)
    >>> opt.lr_multipliers["head/kernel"], opt.lr_multipliers["patch_encoder/kernel"]
    (1.0, 0.125)

    Reference:
        Bao et al., 2022, "BEiT", Sec. 2.6 and Appendix; Clark et al., 2020, "ELECTRA".
    """
    # isinstance: on PyTorch Keras swaps in its own subclasses; AdamW is an Adam.
    cls = next((c for base, c in _CLASSES.items() if isinstance(optimizer, base)), None)
    if cls is None:
        raise ValueError(
            "Layer-wise learning-rate decay wraps keras.optimizers.AdamW, Adam or SGD. "
            f"Received: {type(optimizer).__name__}"
        )
    if optimizer.built:
        raise ValueError("with_layer_decay needs an optimizer that has not been built yet.")
    config = optimizer.get_config()
    config.pop("lr_multipliers", None)
    config.pop("no_weight_decay", None)
    schedule = optimizer._learning_rate
    if isinstance(schedule, keras.optimizers.schedules.LearningRateSchedule):
        config["learning_rate"] = schedule  # the schedule itself, not its config
    return cls(
        lr_multipliers=layer_decay_multipliers(model, decay),
        no_weight_decay=no_weight_decay_paths(model),
        **config,
    )
