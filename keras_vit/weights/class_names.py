"""The input spec each checkpoint source supplies (`ViTConfig.preprocessing`), and
`attach_class_names`, the one step every source shares.

- timm: the checkpoint folder's `config.json` `pretrained_cfg` (the Hub layout `timm/<name>`:
  `model.safetensors` beside `config.json`), else keras_vit's table of timm's pretrained configs
  for the name (`keras_vit.weights.timm.pretrained.pretrained_cfg`), else timm's defaults
  (`resolve_data_config` with no config: ImageNet mean and std, crop_pct 0.875, bilinear):
  `keras_vit.weights.timm.input_spec`;
- transformers: the folder's `preprocessor_config.json`, else the model type's image processor
  defaults (`HF_DEFAULTS`): `keras_vit.weights.huggingface.input_spec`;
- the official `.npz` and the presets: the default `PreprocessingConfig()` (`[-1, 1]`).

A spec the user gave (`preprocessing=` to `from_timm` / `from_huggingface`) wins.

Class names travel the same way (`ViTConfig.class_names`): transformers' `id2label`; timm's
Hub `config.json` `label_names` (what `export_timm(config_json=True)` writes back,
`timm_label_fields`), or the tag's label set where keras_vit ships it (`imagenet-1k`:
`keras_vit.weights.imagenet`); none for other label sets (ImageNet-21k, ...).
"""


def attach_class_names(model, names):
    """Sets `names` on `model` when they fit its head (one per class), else leaves it."""
    config = getattr(model, "config", None)
    if (
        names
        and hasattr(model, "set_class_names")
        and config.include_top
        and config.num_classes == len(names)
        and config.class_names is None
    ):
        model.set_class_names(tuple(names))
    return model
