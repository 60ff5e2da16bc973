"""Every way weights come in or go out.

- `npz`: the official google-research/vision_transformer `.npz` checkpoints
  (`load_npz`, `save_npz`, `read_npz`, the name table);
- `presets`: the named pretrained weights (`ViTB16(weights="imagenet21k")`),
  their catalogue (`presets.catalogue`) and their download to a cached file through
  `keras.utils.get_file`, plus the checks it lacks (`presets.download`);
- `imagenet`: the ImageNet-1k class names and `decode_predictions`;
- `timm` and `huggingface`: `from_timm` and `from_huggingface`, each with its name table;
- `export_timm` and `export_huggingface`: the way back (`export_timm`, `export_huggingface`),
  through the same name tables read backwards by `writing`;
- `state_dict`: PyTorch-style checkpoints read safely (safetensors, `weights_only` torch files);
- `loading`: the strict plan-then-assign loader they (and `npz`) share (their position
  embeddings are resampled with `keras_vit.layers.position_embedding`, PyTorch's bicubic).

The builders (`keras_vit.ViT(weights=...)`) reach `presets` and `npz` through the handler this
package registers with `keras_vit.models.pretrained` on import: `models` never imports `weights`.
"""

from keras_vit._public import public_names as _public_names
from keras_vit.models import pretrained as _pretrained
from keras_vit.weights.imagenet import decode_predictions, imagenet_classes
from keras_vit.weights.npz.checkpoints import (
    NAME_TABLE,
    check_npz,
    load_npz,
    official_variables,
    read_npz,
    save_npz,
)
from keras_vit.weights.presets.catalogue import (
    Preset,
    get_preset,
    get_preset_file,
    list_presets,
    register_preset,
    unregister_preset,
)
from keras_vit.weights.presets.catalogue import resolve_builder_weights as _resolve_preset

_pretrained.register_weights_handler(
    _pretrained.WeightsHandler(resolve_preset=_resolve_preset, load_npz=load_npz)
)

__all__ = _public_names(globals())
