"""Giant ViTs across devices (JAX): FSDP and tensor parallelism from the layers' roles.

- `model_parallel(strategy="fsdp_tp", *, mesh_shape=None, devices=None)`: a
  `keras.distribution.ModelParallel` (`RoleParallel`) over a `("batch", "model")` mesh for
  `"fsdp"`, `"tensor_parallel"` or `"fsdp_tp"`; every variable's layout comes from the role its
  layer declares (`keras_vit.layers.sharding`), and a large variable nothing shards is an error
  when the model is built.
- `layout_map(device_mesh, strategy, model)`: the same layouts as a `keras.distribution.LayoutMap`
  for a `ModelParallel` of one's own; `variable_layouts(model, strategy, mesh_shape)` lists them.
- `abstract_model(name_or_config)`: a model with shapes and no memory (for giants).
- `memory_plan(name_or_config, mesh_shape, *, strategy, ...)`: bytes per device from the layouts
  and XLA's compiled memory analysis of one block.
- `save_sharded(model, folder)` / `load_sharded(model, folder)`: checkpoints written without
  gathering (every process its own blocks) and read onto any mesh; `keras_vit.load_model(folder)`
  builds the model too.

Data parallelism alone stays Keras' `keras.distribution.DataParallel` (or
`keras_vit.training.distribution.distribution_scope("data_parallel")`).
"""

import importlib

# {public name: the module defining it}; imported on first use (no framework at import).
_NAMES = {
    "STRATEGIES": "mesh",
    "parse_mesh": "mesh",
    "default_mesh_shape": "mesh",
    "MIN_SHARD_BYTES": "rules",
    "RoleParallel": "parallel",
    "model_parallel": "parallel",
    "layout_map": "parallel",
    "variable_layouts": "parallel",
    "abstract_model": "abstract",
    "memory_plan": "plan",
    "format_plan": "plan",
    "save_sharded": "checkpoint",
    "load_sharded": "checkpoint",
}
__all__ = sorted(_NAMES)


def __getattr__(name):
    if name not in _NAMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_NAMES[name]}"), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_NAMES))
