"""Models with shapes and no memory: what the layouts and the memory plan of a giant need.

`abstract_model(config)` builds a keras_vit model inside `keras.StatelessScope`, where Keras
creates each variable with its shape, dtype and initializer but no value, and never initialises
it afterwards: DINOv3-7B's 6.7e9 parameters take no memory. Such a model has every variable
path, shape and layer role (`variable_layouts`, `memory_plan`); it cannot be called on data.
"""

import keras
from keras.src.backend.common import global_state

from keras_vit.models.config import ViTConfig
from keras_vit.models.encoder import build_model


def model_config(name_or_config, **overrides):
    """A `ViTConfig` from a config, a variant (`"B/16"`) or a timm model name.

    Example:

    >>> model_config("B/16", num_layers=2).hidden_dim
    768
    """
    if isinstance(name_or_config, ViTConfig):
        if overrides:
            import dataclasses

            return dataclasses.replace(name_or_config, **overrides)
        return name_or_config
    if not isinstance(name_or_config, str):
        raise ValueError(
            "Expected a ViTConfig, a variant such as 'B/16' or a timm model name. "
            f"Received: {type(name_or_config).__name__}"
        )
    try:
        return ViTConfig.from_variant(name_or_config, **overrides)
    except ValueError as variant_error:
        from keras_vit.weights.timm.reader import reads_timm_name, timm_config

        if not reads_timm_name(name_or_config):
            raise ValueError(
                f"{name_or_config!r} is neither a keras_vit variant ({variant_error}) nor a timm "
                "model name keras_vit reads."
            ) from None
        return timm_config(name_or_config, **overrides)


def abstract_model(name_or_config, **overrides):
    """A keras_vit model whose variables have shapes and no values (no memory taken).

    Args:
        name_or_config: a `ViTConfig`, a variant such as `"B/16"` or a timm model name.
        **overrides: `ViT` arguments (`num_layers=2`, `image_size=448`, ...).

    Returns:
        A `keras_vit.VisionTransformer` to read variables and layers from, not to call.

    Example:

    >>> model = abstract_model("vit_7b_patch16_dinov3", num_layers=2)
    >>> model.get_layer("encoderblock_0").mlp
    'swiglu'
    """
    config = model_config(name_or_config, **overrides)
    return abstract(lambda: build_model(config))


def abstract(build):
    """What `build()` returns (a model or layer), its variables made with shapes and no values.

    Example:

    >>> def build():
    ...     return keras.Sequential([keras.Input((4096,)), keras.layers.Dense(16384)])
    >>> model = abstract(build)  # 67e6 weights, no memory taken
    >>> model.layers[0].kernel.shape
    (4096, 16384)
    """
    with keras.StatelessScope(initialize_variables=False):
        model = build()
    forget(model)
    return model


def forget(model):
    """Takes `model`'s variables off Keras' list of variables to initialise later.

    A variable created in a `StatelessScope` waits on that list (Keras' global state) until
    the next scope that initialises variables ends, which would then allocate a giant.
    """
    waiting = global_state.get_global_attribute("uninitialized_variables") or []
    own = {id(v) for v in model.variables}
    waiting[:] = [v for v in waiting if id(v) not in own]
