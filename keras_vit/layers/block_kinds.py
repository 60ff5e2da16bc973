"""The encoder block kinds by value: `BLOCK_KINDS`, the one registry `make_block` reads.

Each kind is its own registered layer class, which registers itself here with
`@register_block_kind(kind)` (timm passes `block_fn` by value the same way); importing
`keras_vit.layers` imports every layer module, so the registry is whole once the package is:

| kind | class | timm |
| --- | --- | --- |
| `"pre"` | `TransformerBlock` | `Block`, `EvaBlock` |
| `"post"` | `PostNormBlock` | `ResPostBlock`, `ResPostRelPosBlock`, `EvaBlockPostNorm` |
| `"parallel"` | `ParallelBlock` | `ParallelThingsBlock` |
| `"parallel_scaling"` | `ParallelScalingBlock` | `(Diff)ParallelScalingBlock` |

The first three share `keras_vit.layers.block_base.EncoderBlock` (arguments, attention core,
MLP family); each class checks only the arguments it takes. These are the blocks a `ViTConfig`
chooses by value (`ViTConfig.block_kind`); a block a family's own model wires itself
(Gemma 4's `SandwichNormBlock`) is a layer, not a kind. `encoder_blocks()`: the classes a
ViT's encoder is made of (what `read_config`, layer decay and the inspection tools look for).
"""

__all__ = ["BLOCK_KINDS"]

BLOCK_KINDS = {}


def register_block_kind(kind):
    """Class decorator: registers a block class as the kind `kind` of `BLOCK_KINDS`.

    Raises:
        ValueError: another class is registered as `kind`.
    """
    if not isinstance(kind, str) or not kind:
        raise ValueError(f"kind must be a non-empty str. Received: kind={kind!r}")

    def register(cls):
        if BLOCK_KINDS.get(kind, cls) is not cls:
            raise ValueError(
                f"Block kind {kind!r} is already {BLOCK_KINDS[kind].__name__}. "
                f"Received: {cls.__name__}"
            )
        BLOCK_KINDS[kind] = cls
        return cls

    return register


def encoder_blocks():
    """The block classes of `BLOCK_KINDS`, a tuple (for `isinstance`)."""
    return tuple(BLOCK_KINDS.values())


def kind_of(block):
    """The `BLOCK_KINDS` key of a block (of its class, or of the nearest registered base).

    Example:

    >>> kind_of(block_class("parallel")(num_heads=2, mlp_dim=16))
    'parallel'
    """
    for cls in type(block).__mro__:
        for kind, registered in BLOCK_KINDS.items():
            if registered is cls:
                return kind
    raise ValueError(
        f"block must be an instance of a BLOCK_KINDS class {tuple(BLOCK_KINDS)}. "
        f"Received: {type(block).__name__}"
    )


def block_class(kind):
    """The block class of `kind` (a key of `BLOCK_KINDS`), else a ValueError naming them.

    Example:

    >>> block_class("post").__name__
    'PostNormBlock'
    """
    if kind not in BLOCK_KINDS:
        raise ValueError(f"kind must be one of {tuple(BLOCK_KINDS)}. Received: kind={kind!r}")
    return BLOCK_KINDS[kind]
