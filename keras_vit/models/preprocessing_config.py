"""`PreprocessingConfig`: the input spec a model carries (`ViTConfig.preprocessing`).

How a checkpoint wants its pixels: `(x * scale - mean) / std` per channel after a resize
(`interpolation`) and a centre crop to the model's `image_size` (timm's `crop_pct` and
`crop_mode`, or an explicit `resize`). Each checkpoint source supplies one (`from_timm`: timm's
`pretrained_cfg`; `from_huggingface`: `preprocessor_config.json`; the official `.npz` and the
presets: the default, `[-1, 1]`), it is saved in `.keras` files with the model's config (files
without one load with the default), and every consumer reads it: `model.preprocessor`
(`keras_vit.layers.ImagePreprocessor`), `keras_vit.preprocess_input(images, model=model)`, the
recipes' pipelines, the SavedModel signatures, LiteRT calibration, inspection's image loading.
`to_timm` / `to_huggingface` write it back out in the other libraries' vocabularies.
"""

import dataclasses
import math

from keras_vit.layers.image_preprocessor import ImagePreprocessor, check_preprocessing

# Named means and stds (timm.data.constants): in docs and in `from_*` error messages.
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)
# transformers' `resample` (PIL codes) <-> interpolation.
PIL_RESAMPLE = {2: "bilinear", 3: "bicubic"}
TIMM_DEFAULT_CROP_PCT = 0.875  # timm.data.constants.DEFAULT_CROP_PCT


@dataclasses.dataclass(frozen=True, kw_only=True)
class PreprocessingConfig:
    """How a model wants its images: resize, centre crop, `(x * scale - mean) / std`.

    The default (mean = std = 0.5 at `scale=1/255`, i.e. `x / 127.5 - 1`; bilinear resize of
    both sides to the model's size) is the official 2021 models' input, and what a model saved
    without a spec loads with.

    Args:
        mean, std: a number or one per channel, in units of `x * scale` (timm's and
            transformers' `[0, 1]` units with `scale=1/255`). Default to 0.5.
        scale: positive float: timm's `ToTensor` (1/255) or transformers' `rescale_factor`.
            Defaults to 1/255.
        interpolation: `"bilinear"` or `"bicubic"` (PIL's). Defaults to `"bilinear"`.
        crop_pct: float in (0, 1]: timm's crop fraction (resize to `floor(size / crop_pct)`,
            then crop `size`). Defaults to 1.0.
        crop_mode: `"center"` (resize the short side, keep the aspect ratio) or `"squash"` (both
            sides). Defaults to `"squash"`.
        resize: None (timm's rule above), an int (the short side: transformers'
            `size={"shortest_edge": n}`) or `(h, w)` (transformers' `size={"height", "width"}`).
            Defaults to None.
        crop_rounding: `"round"` (timm / torchvision: the crop's offset is
            `round((resized - size) / 2)`) or `"floor"` (transformers). Defaults to `"round"`.

    Example:

    >>> spec = PreprocessingConfig.from_timm({"mean": IMAGENET_MEAN, "std": IMAGENET_STD,
    ...     "crop_pct": 0.875, "interpolation": "bicubic"})
    >>> spec.crop_mode, spec.to_timm((224, 224))["input_size"]
    ('center', [3, 224, 224])
    """

    mean: object = 0.5
    std: object = 0.5
    scale: float = 1 / 255
    interpolation: str = "bilinear"
    crop_pct: float = 1.0
    crop_mode: str = "squash"
    resize: object = None
    crop_rounding: str = "round"

    def __post_init__(self):
        mean, std, scale, crop_pct, resize = check_preprocessing(
            mean=self.mean, std=self.std, scale=self.scale, interpolation=self.interpolation,
            crop_pct=self.crop_pct, crop_mode=self.crop_mode, resize=self.resize,
            crop_rounding=self.crop_rounding,
        )
        for name, value in (
            ("mean", mean), ("std", std), ("scale", scale), ("crop_pct", crop_pct),
            ("resize", resize),
        ):
            object.__setattr__(self, name, value)

    @classmethod
    def coerce(cls, value):
        """A `PreprocessingConfig` from None (the default), a dict of its fields, or itself."""
        if value is None:
            return cls()
        if isinstance(value, cls):
            return value
        if isinstance(value, dict):
            unknown = sorted(set(value) - {f.name for f in dataclasses.fields(cls)})
            if unknown:
                raise ValueError(
                    f"Unknown preprocessing fields {unknown}. Expected some of "
                    f"{[f.name for f in dataclasses.fields(cls)]}."
                )
            return cls(**value)
        raise ValueError(
            "preprocessing must be None, a dict or a keras_vit.models.PreprocessingConfig. "
            f"Received: preprocessing={value!r}"
        )

    def check_channels(self, num_channels):
        """Raises unless `mean` and `std` have one value or one per channel."""
        for name in ("mean", "std"):
            values = getattr(self, name)
            if len(values) not in (1, num_channels):
                raise ValueError(
                    f"preprocessing {name} needs 1 or num_channels ({num_channels}) values. "
                    f"Received: {name}={list(values)}"
                )

    def to_dict(self):
        """The fields as a JSON-ready dict (tuples as lists)."""
        return {
            f.name: list(v) if isinstance(v, tuple) else v
            for f in dataclasses.fields(self)
            for v in [getattr(self, f.name)]
        }

    def layer_arguments(self):
        """The keyword arguments of `keras_vit.layers.ImagePreprocessor` (all but the size)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    # timm -----------------------------------------------------------------------------------

    @classmethod
    def from_timm(cls, pretrained_cfg):
        """The spec of a timm `pretrained_cfg` (a Hub `config.json`'s, or timm's table's).

        Missing keys take `timm.data.resolve_data_config`'s defaults (ImageNet mean and std,
        crop_pct 0.875, `"center"`, bilinear).
        """
        cfg = dict(pretrained_cfg or {})
        interpolation = cfg.get("interpolation") or "bilinear"
        if interpolation not in ("bilinear", "bicubic"):
            raise ValueError(
                "from_timm reads pretrained_cfg interpolation 'bilinear' or 'bicubic'. "
                f"Received: interpolation={interpolation!r}"
            )
        return cls(
            mean=IMAGENET_MEAN if cfg.get("mean") is None else cfg["mean"],
            std=IMAGENET_STD if cfg.get("std") is None else cfg["std"],
            interpolation=interpolation,
            crop_pct=cfg.get("crop_pct") or TIMM_DEFAULT_CROP_PCT,
            crop_mode=cfg.get("crop_mode") or "center",
        )

    def _timm_crop(self, image_size):
        """`(crop_pct, crop_mode)` timm resolves to this spec's resize of `image_size`."""
        if self.resize is None:
            return self.crop_pct, self.crop_mode
        if isinstance(self.resize, int):
            size, target, mode = image_size[0], self.resize, "center"
            if image_size[0] != image_size[1]:
                return None
        else:
            if self.resize[0] * image_size[1] != self.resize[1] * image_size[0]:
                return None
            size, target, mode = image_size[0], self.resize[0], "squash"
        pct = size / target
        if math.floor(size / pct) != target:
            pct = size / (target + 0.25)
        return pct, mode

    def to_timm(self, image_size, num_channels=3):
        """The `pretrained_cfg` keys timm's `resolve_data_config` reads for this spec.

        Raises:
            ValueError: the spec has no timm equivalent (transformers' floor-rounded crop, or
                an explicit `resize` timm's `crop_pct` cannot express).
        """
        crop = self._timm_crop(image_size)
        if crop is None or (self.crop_rounding != "round" and crop[0] < 1.0):
            raise ValueError(
                "This model's preprocessing has no timm pretrained_cfg equivalent (timm resizes "
                "by crop_pct and crops with torchvision's rounding). Received: "
                f"preprocessing={self.to_dict()}, image_size={list(image_size)}. Set one with "
                "model.set_preprocessing(crop_pct=..., crop_mode=..., resize=None) first."
            )
        channels = num_channels
        return {
            "input_size": [channels, *image_size],
            "interpolation": self.interpolation,
            "mean": [m / (self.scale * 255) for m in _per_channel(self.mean, channels)],
            "std": [s / (self.scale * 255) for s in _per_channel(self.std, channels)],
            "crop_pct": crop[0],
            "crop_mode": crop[1],
        }

    # transformers -----------------------------------------------------------------------------

    @classmethod
    def from_huggingface(cls, processor_config, image_size):
        """The spec of a transformers `preprocessor_config.json` (a dict) for `image_size`.

        `size` (`shortest_edge`, or `height` / `width`), `do_center_crop` / `crop_size`,
        `rescale_factor`, `image_mean` / `image_std`, `resample` (PIL code 2 or 3) as
        transformers' image processors apply them.
        """
        cfg = dict(processor_config)
        resample = cfg.get("resample", 2)
        if resample not in PIL_RESAMPLE:
            raise ValueError(
                "from_huggingface reads preprocessor_config.json resample 2 (bilinear) or 3 "
                f"(bicubic). Received: resample={resample!r}"
            )
        size = cfg.get("size") or {"height": image_size[0], "width": image_size[1]}
        if isinstance(size, int):
            size = {"shortest_edge": size}
        if not cfg.get("do_resize", True):
            resize = tuple(image_size)
        elif "shortest_edge" in size:
            resize = int(size["shortest_edge"])
        elif "height" in size and "width" in size:
            resize = (int(size["height"]), int(size["width"]))
        else:
            raise ValueError(
                "preprocessor_config.json size must have 'shortest_edge' or 'height' and "
                f"'width'. Received: size={size!r}"
            )
        crop = cfg.get("crop_size") if cfg.get("do_center_crop", False) else None
        if isinstance(crop, int):
            crop = {"height": crop, "width": crop}
        crop = (crop["height"], crop["width"]) if crop else None
        expected = crop or (resize if isinstance(resize, tuple) else None)
        if expected is not None and tuple(expected) != tuple(image_size):
            raise ValueError(
                "preprocessor_config.json makes images of another size than the model's: "
                f"expected {list(image_size)} (the model's image_size). Received: "
                f"{'crop_size' if crop else 'size'}={list(expected)}"
            )
        normalize = cfg.get("do_normalize", True)
        rescale = cfg.get("rescale_factor", 1 / 255) if cfg.get("do_rescale", True) else 1.0
        return cls(
            mean=cfg.get("image_mean", (0.5,)) if normalize else 0.0,
            std=cfg.get("image_std", (0.5,)) if normalize else 1.0,
            scale=rescale,
            interpolation=PIL_RESAMPLE[resample],
            crop_pct=1.0,
            crop_mode="center",
            resize=resize,
            crop_rounding="floor",
        )

    def to_huggingface(self, image_size, num_channels=3):
        """A `preprocessor_config.json` (dict) giving this spec's inputs in transformers.

        `BitImageProcessor` (resize by `shortest_edge` or to `height` x `width`, centre crop,
        rescale, normalise). Its crop offset is `floor((resized - size) / 2)` where timm rounds:
        for a timm-sourced spec and an image whose resized side exceeds the crop by an odd count,
        transformers' crop sits one pixel off timm's on that axis.
        """
        if self.resize is None:
            target = tuple(math.floor(s / self.crop_pct) for s in image_size)
            if self.crop_mode == "squash":
                size = {"height": target[0], "width": target[1]}
            elif target[0] == target[1]:
                size = {"shortest_edge": target[0]}
            else:
                raise ValueError(
                    "transformers' image processors have no timm ResizeKeepRatio (a non-square "
                    f"image_size with crop_mode 'center'). Received: image_size={list(image_size)}"
                )
        elif isinstance(self.resize, int):
            size = {"shortest_edge": self.resize}
        else:
            size = {"height": self.resize[0], "width": self.resize[1]}
        resample = {name: code for code, name in PIL_RESAMPLE.items()}[self.interpolation]
        return {
            "image_processor_type": "BitImageProcessor",
            "do_resize": True,
            "size": size,
            "resample": resample,
            "do_center_crop": True,
            "crop_size": {"height": image_size[0], "width": image_size[1]},
            "do_rescale": True,
            "rescale_factor": self.scale,
            "do_normalize": True,
            "image_mean": list(_per_channel(self.mean, num_channels)),
            "image_std": list(_per_channel(self.std, num_channels)),
            "do_convert_rgb": num_channels == 3,
        }


class InputSpecMixin:
    """`VisionTransformer`'s input-spec API: `preprocessing`, `set_preprocessing`, `preprocessor`
    (and `set_class_names`, the labels that travel the same way).

    The spec is a field of the model's `ViTConfig` (so it is saved with the model and follows
    every rebuild from the config). `set_preprocessing` replaces it in place rather than making a
    copy of the model: no layer reads it, and a copy would double a large model's memory.
    """

    @property
    def preprocessing(self):
        """The model's input spec: `config.preprocessing` (a `PreprocessingConfig`)."""
        return self.config.preprocessing

    def set_preprocessing(self, preprocessing=None, **changes):
        """Replaces the model's input spec (in place: no layer depends on it); returns the model.

        Args:
            preprocessing: None (keep the current spec), a dict or a `PreprocessingConfig`.
            **changes: fields of `PreprocessingConfig` to change on it (`mean=...`).

        Example:

        >>> from keras_vit.models.config import ViTConfig
        >>> from keras_vit.models.encoder import VisionTransformer
        >>> model = VisionTransformer(ViTConfig.from_variant("mu/8", image_size=32))
        >>> model.set_preprocessing(mean=(0.485, 0.456, 0.406)).preprocessing.mean
        (0.485, 0.456, 0.406)
        """
        spec = self.preprocessing if preprocessing is None else preprocessing
        spec = dataclasses.replace(PreprocessingConfig.coerce(spec), **changes)
        self._vit_config = dataclasses.replace(self._vit_config, preprocessing=spec)
        return self

    def set_class_names(self, class_names):
        """Replaces the model's class names (one str per class, or None); returns the model."""
        self._vit_config = dataclasses.replace(self._vit_config, class_names=class_names)
        return self

    @property
    def preprocessor(self):
        """An `ImagePreprocessor` from the spec: uint8 `(B, H, W, C)` of any size -> inputs.

        Resize, centre crop to `config.image_size`, normalise (see
        `keras_vit.layers.ImagePreprocessor`). A new layer on each access.

        Raises:
            ValueError: a NaFlex model (its inputs are patches: `keras_vit.data.naflex_batch`
                with `preprocess=` the spec's normalisation).
        """
        if self.config.naflex:
            raise ValueError(
                "A NaFlex model takes patches, not images: make its inputs with "
                "keras_vit.data.naflex_batch(images, ..., preprocess=lambda x: "
                "keras_vit.preprocess_input(x, model=model)). Received: a model with naflex=True"
            )
        return ImagePreprocessor(
            self.config.image_size,
            name="preprocessor",
            num_channels=self.config.num_channels,
            **self.preprocessing.layer_arguments(),
        )


def _per_channel(values, channels):
    return tuple(values) * channels if len(values) == 1 else tuple(values)
