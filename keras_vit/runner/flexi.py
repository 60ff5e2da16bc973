"""`--patch-sizes`: FlexiViT training in the pretrain and finetune recipes (one set of weights, a
random patch size per batch; `keras_vit.FlexiViT`)."""

from keras_vit.runner.checks import check_patch_sizes  # noqa: F401  (its home: no framework)


def flexi_model(model, info, config):
    """`model` wrapped in a `FlexiViT` training at `config["patch_sizes"]` (unchanged if unset).

    The model's own patch size is the base kernel and stays the evaluation patch size; the
    saved `model.keras` is the `FlexiViT` (deploy one size with `keras_vit.with_patch_size`).
    """
    sizes = check_patch_sizes(config)
    if sizes is None:
        return model, info
    from keras_vit.models.flexi import FlexiViT

    flexi = FlexiViT(model, sizes, seed=config["seed"])
    return flexi, dict(info, patch_sizes=list(sizes), eval_patch_size=list(flexi.patch_size))
