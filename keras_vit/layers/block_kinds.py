"""The encoder block kinds by value: `BLOCK_KINDS`, the one registry `make_block` reads.

Each kind is its own registered layer class (timm passes `block_fn` by value the same way):

| kind | class | timm |
| --- | --- | --- |
| `"pre"` | `TransformerBlock` | `Block`, `EvaBlock` |
| `"post"` | `PostNormBlock` | `ResPostBlock`, `ResPostRelPosBlock`, `EvaBlockPostNorm` |
| `"parallel"` | `ParallelBlock` | `ParallelThingsBlock` |
| `"parallel_scaling"` | `ParallelScalingBlock` | `(Diff)ParallelScalingBlock` |
| `"sandwich"` | `SandwichNormBlock` | `Gemma4Block` |

The first three share `keras_vit.layers.block_base.EncoderBlock` (arguments, attention core,
MLP family); each class checks only the arguments it takes. `ENCODER_BLOCKS`: the classes a
ViT's encoder is made of (what `read_config`, layer decay and the inspection tools look for).
"""

from keras_vit.layers.block_base import EncoderBlock
from keras_vit.layers.parallel_block import ParallelBlock
from keras_vit.layers.parallel_scaling_block import ParallelScalingBlock
from keras_vit.layers.post_norm_block import PostNormBlock
from keras_vit.layers.sandwich_block import SandwichNormBlock
from keras_vit.layers.transformer_block import TransformerBlock

BLOCK_KINDS = {
    "pre": TransformerBlock,
    "post": PostNormBlock,
    "parallel": ParallelBlock,
    "parallel_scaling": ParallelScalingBlock,
    "sandwich": SandwichNormBlock,
}

ENCODER_BLOCKS = (EncoderBlock, ParallelScalingBlock)


def block_class(kind):
    """The block class of `kind` (a key of `BLOCK_KINDS`), else a ValueError naming them.

    Example:

    >>> block_class("post").__name__
    'PostNormBlock'
    """
    if kind not in BLOCK_KINDS:
        raise ValueError(f"kind must be one of {tuple(BLOCK_KINDS)}. Received: kind={kind!r}")
    return BLOCK_KINDS[kind]
