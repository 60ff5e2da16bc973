"""Weights of `.keras` files saved before the block kinds were classes of their own.

A `.keras` file files each layer of a model under its class's snake-case name
(`layers/transformer_block_3/attention/...`, Keras' `saving_lib`), not under the layer's name.
Earlier versions saved residual post-norm and parallel blocks as `TransformerBlock`s
(`block_norm="post"`, `num_parallel > 1`), so their weights sit under `transformer_block_{k}`,
where a model of today has `post_norm_block_{k}` or `parallel_block_{k}` (the same sublayers,
variables and order: only the group names differ, and a ViT's blocks are all of one kind, so
`k` is the same).

`read_legacy_layout(block, store)`, called from such a block's `load_own_variables`, sees
whether the file has the block's group; when it has not but has the old one, it makes the
weights store (Keras' `H5IOStore`, which every `get` of the load goes through) read the old
group names for every path under a renamed block, and returns the block's own entry.
"""

import re

_RENAMED = re.compile(r"(^|/)(post_norm_block|parallel_block)(_\d+)?(?=/|$)")


def _legacy_path(path):
    """`path` with every post-norm / parallel block group under its earlier name."""
    return _RENAMED.sub(lambda m: f"{m.group(1)}transformer_block{m.group(3) or ''}", path)


def read_legacy_layout(store):
    """The store to load a renamed block's own variables from (see the module docstring).

    `store`: what Keras passes to `load_own_variables` (an `H5IOStore` in read mode, whose
    `get` returns itself, positioned on the block's group). Anything else (a dict, a store
    that has the block's group, one without the old group) is returned unchanged.
    """
    path = getattr(store, "_h5_entry_path", None)
    has_path = getattr(store, "has_path", None)
    if not path or has_path is None or getattr(store, "mode", None) != "r":
        return store
    legacy = _legacy_path(path)
    if legacy == path or has_path(path) or not has_path(legacy):
        return store
    if not getattr(store, "_keras_vit_legacy_layout", False):
        get = store.get

        def legacy_get(entry_path):
            if entry_path and not has_path(entry_path):
                old = _legacy_path(entry_path)
                if old != entry_path and has_path(old):
                    return get(old)
            return get(entry_path)

        store.get = legacy_get  # every later `get` of this load (the block's sublayers)
        store._keras_vit_legacy_layout = True
    return store.get(path)
