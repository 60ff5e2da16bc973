"""`--patch-sizes`: FlexiViT training in the pretrain and finetune recipes (one set of weights, a
random patch size per batch; `keras_vit.FlexiViT`)."""

from keras_vit.layers._checks import to_pair
from keras_vit.models.flexi import FlexiViT


def check_patch_sizes(config):
    """The config's `patch_sizes` as a tuple (None when unset), each dividing `image_size`."""
    sizes = config.get("patch_sizes")
    if sizes is None:
        return None
    sizes = tuple(sizes)
    height, width = to_pair(config["image_size"], "image_size")
    bad = [p for p in sizes if not isinstance(p, int) or p <= 0 or height % p or width % p]
    if not sizes or bad:
        raise ValueError(
            f"--patch-sizes must be positive ints that divide the image size {(height, width)}. "
            f"Received: patch_sizes={list(sizes)}"
        )
    if config.get("lora_rank") is not None:
        raise ValueError("--patch-sizes (FlexiViT) and --lora-rank cannot be combined.")
    return sizes


def flexi_model(model, info, config):
    """`model` wrapped in a `FlexiViT` training at `config["patch_sizes"]` (unchanged if unset).

    The model's own patch size is the base kernel and stays the evaluation patch size; the
    saved `model.keras` is the `FlexiViT` (deploy one size with `keras_vit.with_patch_size`).
    """
    sizes = check_patch_sizes(config)
    if sizes is None:
        return model, info
    flexi = FlexiViT(model, sizes, seed=config["seed"])
    return flexi, dict(info, patch_sizes=list(sizes), eval_patch_size=list(flexi.patch_size))
