"""`ImagePreprocessor` and `PreprocessingConfig` against timm's eval transform and transformers'
image processors on the same PIL images (tolerances: docs/weights.md "Preprocessing per family").
"""

import json

import keras
import numpy as np
import pytest

from keras_vit.layers import ImagePreprocessor
from keras_vit.models.preprocessing_config import (
    CLIP_MEAN,
    CLIP_STD,
    IMAGENET_MEAN,
    IMAGENET_STD,
    PreprocessingConfig,
)
from tests.weights.references import import_timm, import_transformers

# The resize's tolerance in pixel levels (0..255): PIL and torchvision compute with fixed-point
# weights, keras_vit in float32; both round each pass to uint8, so a value can land one level
# apart (measured: at most 1 level on all three backends, mean 0.02; docs/weights.md). In the
# model's units that is 1 / 255 / std (0.0175 with ImageNet's std).
PIXEL_TOLERANCE = 1.001  # levels of 255
NORMALISATION_TOLERANCE = 1e-6


def photo(height, width, seed=0):
    """A uint8 RGB image with smooth content, edges and texture (a photo's mix of frequencies)."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width].astype("float64")
    base = np.stack(
        [
            127 + 100 * np.sin(x / 9.0) * np.cos(y / 13.0),
            255 * x / width,
            200 * ((x // 7 + y // 5) % 2),
        ],
        -1,
    )
    return np.clip(base + rng.normal(0, 12, base.shape), 0, 255).astype("uint8")


# (pretrained_cfg, input size, image size (h, w)): DeiT / ImageNet, CLIP, [-1, 1] (AugReg);
# crop_pct 0.875 / 0.9 / 1.0; bicubic and bilinear; squash; portrait and landscape inputs.
TIMM_CASES = [
    (
        dict(mean=IMAGENET_MEAN, std=IMAGENET_STD, crop_pct=0.875, interpolation="bicubic"),
        32,
        (57, 83),
    ),
    (dict(mean=CLIP_MEAN, std=CLIP_STD, crop_pct=1.0, interpolation="bicubic"), 32, (90, 61)),
    (dict(mean=(0.5,) * 3, std=(0.5,) * 3, crop_pct=0.9, interpolation="bilinear"), 24, (48, 48)),
    (
        dict(
            mean=IMAGENET_MEAN,
            std=IMAGENET_STD,
            crop_pct=0.9,
            interpolation="bilinear",
            crop_mode="squash",
        ),
        28,
        (40, 71),
    ),
    (
        dict(mean=IMAGENET_MEAN, std=IMAGENET_STD, crop_pct=0.875, interpolation="bicubic"),
        32,
        (20, 25),
    ),  # enlarged
    # A non-square image_size: timm's ResizeKeepRatio leaves the resized image narrower (or
    # shorter) than the crop, and CenterCrop pads it with pixel 0 (odd padding: one more
    # pixel after than before): issue 56's NaN.
    (dict(mean=IMAGENET_MEAN, std=IMAGENET_STD, crop_pct=0.9, interpolation="bicubic"), (16, 28),
     (40, 40)),
    (dict(mean=(0.5,) * 3, std=(0.5,) * 3, crop_pct=1.0, interpolation="bilinear"), (24, 12),
     (30, 50)),
]  # fmt: skip


def timm_eval(cfg, size, image):
    timm = import_timm()
    from PIL import Image

    size = (size, size) if isinstance(size, int) else size
    cfg = dict(cfg, input_size=(3, *size))
    config = timm.data.resolve_data_config({}, pretrained_cfg=cfg)
    transform = timm.data.create_transform(**config)
    return transform(Image.fromarray(image)).permute(1, 2, 0).numpy()


def unnormalise(x, spec):
    return (np.asarray(x) * np.asarray(spec.std) + np.asarray(spec.mean)) / spec.scale


@pytest.mark.parametrize("cfg, size, shape", TIMM_CASES)
def test_preprocessor_matches_timm_eval_transform(cfg, size, shape):
    image = photo(*shape)
    expected = timm_eval(cfg, size, image)
    spec = PreprocessingConfig.from_timm(cfg)
    layer = ImagePreprocessor(size, **spec.layer_arguments())
    got = keras.ops.convert_to_numpy(layer(image[None]))[0]
    pair = (size, size) if isinstance(size, int) else size
    assert got.shape == expected.shape == (*pair, 3)
    assert np.isfinite(got).all()
    # In pixel levels: the resize's difference only.
    diff = np.abs(unnormalise(got, spec) - unnormalise(expected, spec))
    assert diff.max() <= PIXEL_TOLERANCE, diff.max()
    assert diff.mean() < 0.1
    # The normalisation is exact (float32 rounding) on the same resized pixels.
    pixels = np.round(unnormalise(expected, spec))
    normalised = keras.ops.convert_to_numpy(
        keras.ops.divide(
            keras.ops.subtract(
                keras.ops.multiply(pixels.astype("float32"), spec.scale), np.float32(spec.mean)
            ),
            np.float32(spec.std),
        )
    )
    np.testing.assert_allclose(normalised, expected, rtol=0, atol=NORMALISATION_TOLERANCE)


def test_normalisation_alone_equals_timm_exactly():
    """Without a resize (image at the model size, crop_pct 1), only rounding separates them."""
    cfg = dict(mean=CLIP_MEAN, std=CLIP_STD, crop_pct=1.0, interpolation="bicubic")
    image = photo(24, 24)
    expected = timm_eval(cfg, 24, image)
    spec = PreprocessingConfig.from_timm(cfg)
    got = keras.ops.convert_to_numpy(ImagePreprocessor(24, **spec.layer_arguments())(image[None]))
    np.testing.assert_allclose(got[0], expected, rtol=0, atol=NORMALISATION_TOLERANCE)


def test_default_spec_is_the_official_scaling():
    """At the model's size the default spec is `x / 127.5 - 1` (XLA may use a reciprocal)."""
    image = photo(16, 16)
    got = ImagePreprocessor(16)(image[None])
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(got)[0],
        image.astype("float32") / 127.5 - 1.0,
        rtol=0,
        atol=2.5e-7,
    )


def test_timm_pretrained_cfg_round_trips_through_to_timm():
    timm = import_timm()
    for cfg, size, _ in TIMM_CASES:
        spec = PreprocessingConfig.from_timm(cfg)
        written = spec.to_timm((size, size))
        ours = timm.data.resolve_data_config({}, pretrained_cfg=written)
        theirs = dict(cfg, input_size=(3, size, size))
        theirs = timm.data.resolve_data_config({}, pretrained_cfg=theirs)
        assert ours.pop("crop_pct") == pytest.approx(theirs.pop("crop_pct"), abs=1e-12)
        assert {k: tuple(v) if isinstance(v, list) else v for k, v in ours.items()} == {
            k: tuple(v) if isinstance(v, list) else v for k, v in theirs.items()
        }


HF_CASES = [
    # DINOv2 (BitImageProcessor): shortest_edge 256 -> crop 224, bicubic, ImageNet.
    dict(image_processor_type="BitImageProcessor", size={"shortest_edge": 37},
         crop_size={"height": 32, "width": 32}, do_center_crop=True, resample=3,
         image_mean=list(IMAGENET_MEAN), image_std=list(IMAGENET_STD)),
    # google/vit-base-patch16-224 (ViTImageProcessor): squash to 224, bilinear, [-1, 1].
    dict(image_processor_type="ViTImageProcessor", size={"height": 32, "width": 32},
         resample=2, image_mean=[0.5] * 3, image_std=[0.5] * 3),
    # CLIP (and AIMv2): shortest_edge = crop, bicubic, CLIP mean.
    dict(image_processor_type="CLIPImageProcessor", size={"shortest_edge": 32},
         crop_size={"height": 32, "width": 32}, do_center_crop=True, resample=3,
         image_mean=list(CLIP_MEAN), image_std=list(CLIP_STD)),
    # BEiT (BeitImageProcessor): squash, bicubic, [-1, 1].
    dict(image_processor_type="BeitImageProcessor", size={"height": 32, "width": 32},
         do_center_crop=False, resample=3, image_mean=[0.5] * 3, image_std=[0.5] * 3),
    # DINOv3 (DINOv3ViTImageProcessor, torchvision only): squash, bilinear, ImageNet. It rescales
    # to [0, 1] before resizing, so its resized pixels are not rounded to uint8 levels as PIL's
    # and keras_vit's are: half a level of rounding on top (mean tolerance MEAN_UNROUNDED).
    dict(image_processor_type="DINOv3ViTImageProcessor", size={"height": 32, "width": 32},
         resample=2, image_mean=list(IMAGENET_MEAN), image_std=list(IMAGENET_STD)),
]  # fmt: skip
# The mean difference (levels) against a processor that resizes without rounding to uint8.
MEAN_UNROUNDED = 0.35
UNROUNDED = ("DINOv3ViTImageProcessor",)
# The processors with a PIL ("slow", `use_fast=False`; transformers 5: `backend="pil"`)
# implementation beside the torchvision ("fast") one.
HAS_SLOW = ("BitImageProcessor", "ViTImageProcessor", "CLIPImageProcessor", "BeitImageProcessor")


def hf_processor(config, tmp_path, implementation="fast"):
    """transformers' image processor of a `preprocessor_config.json`: its torchvision ("fast")
    or PIL-based ("slow") implementation."""
    transformers = import_transformers()
    (tmp_path / "preprocessor_config.json").write_text(json.dumps(config))
    fast = implementation == "fast"
    version5 = int(transformers.__version__.split(".")[0]) >= 5
    choice = {"backend": "torchvision" if fast else "pil"} if version5 else {"use_fast": fast}
    try:
        processor = transformers.AutoImageProcessor.from_pretrained(str(tmp_path), **choice)
    except (ValueError, KeyError, AttributeError) as error:  # a processor this version lacks
        pytest.skip(f"{config['image_processor_type']} ({implementation}): {error}")
    name = type(processor).__name__  # transformers 5: FooPil / Foo; 4: Foo / FooFast
    assert (not name.endswith("Pil") if version5 else name.endswith("Fast")) == fast, name
    return processor


@pytest.mark.parametrize("config", HF_CASES, ids=lambda c: c["image_processor_type"])
@pytest.mark.parametrize("shape", [(57, 83), (90, 61)])
@pytest.mark.parametrize("implementation", ["fast", "slow"])
def test_preprocessor_matches_transformers_image_processor(config, shape, implementation, tmp_path):
    if implementation == "slow" and config["image_processor_type"] not in HAS_SLOW:
        pytest.skip(f"{config['image_processor_type']} has no PIL implementation")
    image = photo(*shape, seed=1)
    processor = hf_processor(config, tmp_path, implementation)
    from PIL import Image

    expected = processor(Image.fromarray(image), return_tensors="np")["pixel_values"][0]
    expected = expected.transpose(1, 2, 0)
    spec = PreprocessingConfig.from_huggingface(config, (32, 32))
    got = keras.ops.convert_to_numpy(ImagePreprocessor(32, **spec.layer_arguments())(image[None]))
    diff = np.abs(unnormalise(got[0], spec) - unnormalise(expected, spec))
    assert diff.max() <= PIXEL_TOLERANCE, diff.max()
    unrounded = config["image_processor_type"] in UNROUNDED
    assert diff.mean() < (MEAN_UNROUNDED if unrounded else 0.1), diff.mean()


@pytest.mark.parametrize("cfg, size, shape", TIMM_CASES[:3])
@pytest.mark.parametrize("implementation", ["fast", "slow"])
def test_written_preprocessor_config_gives_the_same_inputs(
    cfg, size, shape, implementation, tmp_path
):
    """`to_huggingface` -> AutoImageProcessor gives what keras_vit computes (resize tolerance)."""
    spec = PreprocessingConfig.from_timm(cfg)
    processor = hf_processor(spec.to_huggingface((size, size)), tmp_path, implementation)
    image = photo(*shape, seed=2)
    from PIL import Image

    expected = processor(Image.fromarray(image), return_tensors="np")["pixel_values"][0]
    expected = expected.transpose(1, 2, 0)
    # transformers crops at floor((resized - size) / 2): compare with keras_vit's floor crop.
    floor_spec = PreprocessingConfig(**{**spec.layer_arguments(), "crop_rounding": "floor"})
    got = keras.ops.convert_to_numpy(
        ImagePreprocessor(size, **floor_spec.layer_arguments())(image[None])
    )
    diff = np.abs(unnormalise(got[0], spec) - unnormalise(expected, spec))
    assert diff.max() <= PIXEL_TOLERANCE, diff.max()


def test_preprocessor_runs_on_unknown_sizes_in_a_compiled_function():
    """The resize sizes come from the input's shape at run time (jit / tf.function / torch):
    a compiled model with unknown sizes gives the compiled model of the known size's result, and
    the eager layer's."""
    # A square size, and a non-square one (timm's ResizeKeepRatio: the dynamic ratio as the
    # static one, the smaller of the two).
    for size in (8, (8, 12)):
        layer = ImagePreprocessor(size, **PreprocessingConfig.from_timm({}).layer_arguments())
        inputs = keras.Input((None, None, 3), dtype="uint8")
        model = keras.Model(inputs, layer(inputs))
        for shape in ((12, 20), (30, 9)):
            image = photo(*shape)[None]
            known = keras.Input((*shape, 3), dtype="uint8")
            np.testing.assert_allclose(
                model.predict(image, verbose=0),
                keras.Model(known, layer(known)).predict(image, verbose=0), atol=1e-5,
            )  # fmt: skip
            # Against eager execution: a uint8 image is rounded after each resize pass (PIL).
            # On JAX the tests' XLA flags (tests/xla_test_flags.py) let a fused dot round its
            # last bit unlike eager's standalone dot, so that an exact x.5 can round to either
            # neighbour there: on JAX against eager on float pixels (no rounding step), and
            # TensorFlow's graph and PyTorch run eager's kernels, also on uint8.
            if keras.backend.backend() != "jax":
                np.testing.assert_allclose(
                    model.predict(image, verbose=0), keras.ops.convert_to_numpy(layer(image)),
                    atol=1e-5,
                )  # fmt: skip
            pixels = keras.ops.cast(image, "float32")
            float_model = keras.Model(floats := keras.Input((None, None, 3)), layer(floats))
            np.testing.assert_allclose(
                float_model.predict(pixels, verbose=0), keras.ops.convert_to_numpy(layer(pixels)),
                atol=1e-5,
            )  # fmt: skip


@pytest.mark.parametrize("resize, size", [((16, 16), 32), ((15, 20), (24, 24))])
def test_a_crop_larger_than_the_resized_image_is_zero_padded_as_torchvision(resize, size):
    """torchvision's CenterCrop pads a smaller image with pixel 0 (odd padding: the extra pixel
    after); keras_vit did the same arithmetic with a zero weight sum, NaN (issue 56)."""
    from PIL import Image

    import_timm()  # torchvision with it
    from torchvision import transforms

    image = photo(40, 50)
    pair = (size, size) if isinstance(size, int) else size
    resized = Image.fromarray(image).resize(resize[::-1], Image.BILINEAR)
    expected = np.asarray(transforms.CenterCrop(pair)(resized), "float32")
    layer = ImagePreprocessor(size, mean=0.0, std=1.0, scale=1.0, resize=resize)
    got = keras.ops.convert_to_numpy(layer(image[None]))[0]
    assert np.isfinite(got).all()
    inside = np.zeros(pair, bool)  # where the resized image lies in the crop
    top, left = ((c - r) // 2 for c, r in zip(pair, resize, strict=True))
    inside[top : top + resize[0], left : left + resize[1]] = True
    assert (got[~inside] == 0).all() and (expected[~inside] == 0).all()  # padding: pixel 0
    assert np.abs(got - expected).max() <= PIXEL_TOLERANCE


def test_bad_arguments_name_the_argument():
    with pytest.raises(ValueError, match="interpolation must be one of"):
        ImagePreprocessor(8, interpolation="lanczos")
    with pytest.raises(ValueError, match=r"crop_pct must be in \(0, 1\]. Received: crop_pct=1.5"):
        PreprocessingConfig(crop_pct=1.5)
    with pytest.raises(ValueError, match="std must be positive"):
        PreprocessingConfig(std=(0.2, 0.0, 0.2))
    with pytest.raises(ValueError, match="'border' is not supported"):
        PreprocessingConfig.from_timm({"crop_mode": "border"})
    with pytest.raises(ValueError, match="resample 2 .bilinear. or 3"):
        PreprocessingConfig.from_huggingface({"resample": 1}, (8, 8))
    with pytest.raises(ValueError, match=r"expected \[32, 32\].*crop_size=\[24, 24\]"):
        PreprocessingConfig.from_huggingface(
            {"do_center_crop": True, "crop_size": {"height": 24, "width": 24}}, (32, 32)
        )


def _table_specs():
    """One name per distinct input spec of keras_vit's table of timm's pretrained configs (every
    tag of every family: mean, std, crop_pct, crop_mode, interpolation), 'border' left out
    (the preprocessor lacks it; from_timm warns)."""
    from keras_vit.weights.timm import pretrained as timm_pretrained

    names = {}
    for name in timm_pretrained.pretrained_names():
        cfg = timm_pretrained.pretrained_cfg(name)
        key = (tuple(cfg["mean"]), tuple(cfg["std"]), cfg["crop_pct"], cfg["crop_mode"],
               cfg["interpolation"])  # fmt: skip
        if cfg["crop_mode"] != "border":
            names.setdefault(key, name)
    return sorted(names.values())


@pytest.mark.parametrize("name", _table_specs())
def test_every_table_spec_matches_timms_eval_transform(name):
    """Each distinct spec timm's pretrained configs hold (at a 32 px input size): the
    preprocessor of `from_timm(name)`'s spec against timm's eval transform of that config."""
    from keras_vit.weights.timm.pretrained import pretrained_cfg

    cfg = {k: v for k, v in pretrained_cfg(name).items() if k in
           ("mean", "std", "crop_pct", "crop_mode", "interpolation")}  # fmt: skip
    image = photo(45, 61, seed=7)
    expected = timm_eval(cfg, 32, image)
    spec = PreprocessingConfig.from_timm(cfg)
    got = keras.ops.convert_to_numpy(ImagePreprocessor(32, **spec.layer_arguments())(image[None]))
    diff = np.abs(unnormalise(got[0], spec) - unnormalise(expected, spec))
    assert diff.max() <= PIXEL_TOLERANCE, (name, diff.max())
    assert diff.mean() < 0.1, (name, diff.mean())
