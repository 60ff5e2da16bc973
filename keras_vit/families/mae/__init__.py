"""Masked autoencoders from Hugging Face (ViTMAEForPreTraining, ViTMAEModel)."""

from keras_vit.weights.registry import ModelFamily, register

_READER = "keras_vit.families.mae.huggingface:from_huggingface_mae"
_WRITER = "keras_vit.families.mae.huggingface:export_huggingface_mae"
FAMILY = register(
    ModelFamily(
        name="mae",
        description=" ".join(__doc__.split()),
        huggingface_readers={
            "vit_mae": _READER,
        },
        # export_huggingface(MaskedAutoencoder) writes a ViTMAEForPreTraining folder
        huggingface_writers={
            "keras_vit>MaskedAutoencoder": _WRITER,
        },
    )
)
