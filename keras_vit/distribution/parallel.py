"""`RoleParallel`: a `keras.distribution.ModelParallel` whose layouts come from the layers' roles.

Keras asks a distribution for the layout of each variable when the variable is created
(`Distribution.get_variable_layout`; on JAX the variable is then initialised already sharded).
`RoleParallel` answers from the layers that create the variable, read off Keras' name scopes
(`Layer.add_weight` opens one per layer, the layer as its caller): the innermost layer that
declares a role for it (`keras_vit.layers.sharding`) decides, and `Rules` turns the role into
axes for the strategy and the mesh. A large variable that nothing shards raises at that moment,
while the model is built. Optimizer slots (AdamW's moments, the EMA weights) take the layout of
their variable (Keras' `add_variable_from_reference`), so FSDP shards them too.

Entries of the optional `layout_map` (Keras' regex keys) win over the roles: a user's override.
`variable_layouts(model, ...)` gives the same layouts for a built (or abstract) model by
walking its layers, and `layout_map(...)` writes them as a plain `keras.distribution.LayoutMap`
of exact, escaped paths for a `ModelParallel` of one's own.
"""

import re

import keras
from keras.src.backend.common import global_state

from keras_vit.distribution.data import DataAxisCheck
from keras_vit.distribution.mesh import check_jax, check_strategy, device_mesh
from keras_vit.distribution.rules import MIN_SHARD_BYTES, Rules, check_min_shard_bytes
from keras_vit.layers.sharding import role_of


def creating_layers():
    """The layers whose name scopes are open now, outermost first (Keras' name-scope stack).

    Inside `Layer.add_weight` the last one owns the variable being created. Keras keeps the
    stack in its global state (`name_scope_stack`, each scope with its `caller`); this is the
    one place keras_vit reads it.
    """
    stack = global_state.get_global_attribute("name_scope_stack") or []
    return [scope.caller for scope in stack if isinstance(scope.caller, keras.layers.Layer)]


class RoleParallel(DataAxisCheck, keras.distribution.ModelParallel):
    """`ModelParallel` over a `("batch", "model")` mesh with layouts from the layers' roles.

    Args:
        strategy: `"fsdp"`, `"tensor_parallel"` or `"fsdp_tp"`.
        device_mesh: a `keras.distribution.DeviceMesh` with axes `("batch", "model")`.
        min_shard_bytes: int. Variables smaller than this may stay whole; at least this large
            they must shard (else a `ValueError` when the model is built). Defaults to 1 MiB.
        layout_map: optional `keras.distribution.LayoutMap` of overrides (they win).
        auto_shard_dataset: bool. Keras' `ModelParallel` argument. Defaults to True.
    """

    def __init__(
        self,
        strategy,
        device_mesh,
        *,
        min_shard_bytes=MIN_SHARD_BYTES,
        layout_map=None,
        auto_shard_dataset=True,
    ):
        check_strategy(strategy)
        if tuple(device_mesh.axis_names) != ("batch", "model"):
            raise ValueError(
                "device_mesh must have the axes ('batch', 'model'). Received: "
                f"{tuple(device_mesh.axis_names)}"
            )
        layout_map = layout_map or keras.distribution.LayoutMap(device_mesh)
        super().__init__(
            layout_map=layout_map, batch_dim_name="batch", auto_shard_dataset=auto_shard_dataset
        )
        self.strategy = strategy
        self.rules = Rules(strategy, device_mesh.shape, check_min_shard_bytes(min_shard_bytes))

    def get_variable_layout(self, variable):
        if getattr(variable, "_layout", None) is not None:
            return variable._layout
        explicit = self._layout_map[variable.path]
        if explicit is not None:
            return explicit
        role, source = role_of(creating_layers(), variable.name)
        axes = self.rules.spec(
            variable.path, variable.shape, variable.dtype, role, variable.name, source
        )
        return keras.distribution.TensorLayout(axes, self.device_mesh)

    def __repr__(self):
        return (
            f"<RoleParallel strategy={self.strategy!r} mesh={self.device_mesh.shape} "
            f"min_shard_bytes={self.rules.min_shard_bytes}>"
        )


def model_parallel(
    strategy="fsdp_tp", *, mesh_shape=None, devices=None, min_shard_bytes=MIN_SHARD_BYTES
):
    """The distribution that shards a keras_vit model over the devices (JAX).

    `"fsdp"` shards parameters, gradients and optimizer state over the data axis (ZeRO-3; XLA
    gathers each layer's weights when it runs), `"tensor_parallel"` splits every block
    Megatron-style (in-projections by their outputs, out-projections by their inputs: one
    all-reduce after the attention, one after the MLP), `"fsdp_tp"` does both on a 2-D mesh.
    The layouts come from the layers' roles (`keras_vit.layers.sharding`) for every block kind
    and family; data parallelism alone is Keras' own `keras.distribution.DataParallel`.

    Args:
        strategy: `"fsdp"`, `"tensor_parallel"` or `"fsdp_tp"`. Defaults to `"fsdp_tp"`.
        mesh_shape: optional `(batch, model)` sizes (or `"2x4"`). Defaults to every device on
            the strategy's axis (`fsdp_tp`: one process's devices on the model axis with
            several processes; else `(4, 2)` on 8 devices).
        devices: optional list of devices. Defaults to every device of every process.
        min_shard_bytes: int. Variables smaller than this may stay whole; larger ones must
            shard, else building the model raises a `ValueError` naming the variable. Defaults
            to 1 MiB.

    Returns:
        A `keras.distribution.ModelParallel` (`RoleParallel`): build, compile and fit inside
        its `scope()` (or after `keras.distribution.set_distribution`).

    Raises:
        ValueError: off JAX; an unknown strategy; a mesh of more devices than exist or not
            matching the strategy. A mesh that does not divide the heads or widths raises
            when the model is built, naming the dimension.

    Example:

    ```python
    distribution = keras_vit.distribution.model_parallel("fsdp", mesh_shape=(8, 1))
    with distribution.scope():
        model = keras_vit.ViT("L/16", num_classes=10)
        model.compile("adamw", "categorical_crossentropy")
        model.fit(images, labels, batch_size=64)
    ```
    """
    check_jax("keras_vit.distribution.model_parallel")
    mesh = device_mesh(strategy, mesh_shape, devices)
    return RoleParallel(strategy, mesh, min_shard_bytes=min_shard_bytes)


def walk_variables(layer, chain=()):
    """`(chain, variable)` for every variable of `layer`: the layers holding it, outermost
    first (nested models included), each variable once."""
    seen = set()

    def walk(layer, chain):
        chain = (*chain, layer)
        own = list(getattr(layer, "_trainable_variables", [])) + list(
            getattr(layer, "_non_trainable_variables", [])
        )
        for variable in own:
            if id(variable) not in seen:
                seen.add(id(variable))
                yield chain, variable
        for sub in layer._flatten_layers(include_self=False, recursive=False):
            yield from walk(sub, chain)

    yield from walk(layer, tuple(chain))


def variable_layouts(model, strategy, mesh_shape, *, min_shard_bytes=MIN_SHARD_BYTES):
    """`{path: (axes, role, source)}` of every variable of a built (or abstract) model.

    The layouts `RoleParallel` gives these variables when the model is built under it, found
    by walking the model's layers instead of Keras' name scopes (no devices needed).

    Example:

    >>> import keras_vit
    >>> model = keras_vit.ViT("mu/8", image_size=16, num_classes=3)
    >>> layouts = variable_layouts(model, "tensor_parallel", (1, 2), min_shard_bytes=0)
    >>> layouts["encoderblock_0/attention/query/kernel"]
    ((None, 'model', None), 'column', 'MultiHeadSelfAttention')
    """
    check_strategy(strategy)
    rules = Rules(strategy, mesh_shape, min_shard_bytes)
    layouts = {}
    for chain, variable in walk_variables(model):
        role, source = role_of(chain, variable.name)
        axes = rules.spec(
            variable.path, variable.shape, variable.dtype, role, variable.name, source
        )
        layouts[variable.path] = (axes, role, source)
    return layouts


def layout_map(device_mesh, strategy, model, *, min_shard_bytes=MIN_SHARD_BYTES):
    """The `keras.distribution.LayoutMap` of a model's role layouts, for a `ModelParallel`.

    Keys are the model's variable paths, escaped (a `LayoutMap` fullmatches its keys as
    regexes on `variable.path`), so each matches its own variable only. Build the model with
    the same names (the same builder and arguments) under the `ModelParallel`. Keras replicates
    any variable a `LayoutMap` does not match, silently: `model_parallel`, which decides each
    layout as the variable is created, cannot miss one.

    Args:
        device_mesh: a `keras.distribution.DeviceMesh` with axes `("batch", "model")`.
        strategy: `"fsdp"`, `"tensor_parallel"` or `"fsdp_tp"`.
        model: a built keras_vit model, or what `keras_vit.distribution.abstract_model` takes
            (a `ViTConfig`, a variant such as `"B/16"`, a timm name): built without memory.
        min_shard_bytes: int. See `model_parallel`. Defaults to 1 MiB.

    Returns:
        A `keras.distribution.LayoutMap`.
    """
    check_strategy(strategy)
    if tuple(device_mesh.axis_names) != ("batch", "model"):
        raise ValueError(
            "device_mesh must have the axes ('batch', 'model'). Received: "
            f"{tuple(device_mesh.axis_names)}"
        )
    if not isinstance(model, keras.layers.Layer):
        from keras_vit.distribution.abstract import abstract_model

        model = abstract_model(model)
    layouts = variable_layouts(
        model, strategy, device_mesh.shape, min_shard_bytes=min_shard_bytes
    )
    result = keras.distribution.LayoutMap(device_mesh)
    for path, (axes, _, _) in layouts.items():
        result[re.escape(path)] = axes
    return result
