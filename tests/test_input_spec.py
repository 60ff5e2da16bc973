"""Issue 42: the input spec and the class names travel with the model, from each checkpoint
source to every consumer (saving, pipelines, fine-tuning, serving, calibration, exports)."""

import base64
import json
import os

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit.models import PreprocessingConfig, ViT
from keras_vit.models.preprocessing_config import CLIP_MEAN, CLIP_STD, IMAGENET_MEAN, IMAGENET_STD
from tests.helpers import randomize_weights, to_numpy
from tests.layers.test_image_preprocessor import PIXEL_TOLERANCE, photo, timm_eval, unnormalise

ROOT = os.path.dirname(os.path.abspath(__file__))
DINOV2 = dict(mean=IMAGENET_MEAN, std=IMAGENET_STD, crop_pct=0.875, interpolation="bicubic")


def tiny(**kwargs):
    return ViT("mu/8", image_size=32, num_layers=1, num_classes=3, **kwargs)


def test_keras_file_keeps_the_spec_and_the_class_names(tmp_path):
    spec = PreprocessingConfig.from_timm(DINOV2)
    model = tiny(preprocessing=spec, class_names=["cat", "dog", "eel"])
    path = str(tmp_path / "m.keras")
    model.save(path)
    loaded = keras_vit.load_model(path)
    assert loaded.preprocessing == spec
    assert loaded.config.class_names == ("cat", "dog", "eel")
    assert loaded.config == model.config


@pytest.mark.parametrize("name", ["vit_main_602138d.keras", "vit_all_options.keras"])
def test_keras_file_without_a_spec_loads_with_minus_one_one(name):
    model = keras_vit.load_model(os.path.join(ROOT, "data", name))
    assert model.preprocessing == PreprocessingConfig()
    pixels = np.array([[[[0, 128, 255]]]], "uint8")
    np.testing.assert_allclose(
        to_numpy(keras_vit.preprocess_input(pixels, model=model)),
        pixels / 127.5 - 1.0,
        rtol=0,
        atol=1e-6,
    )


def test_preprocess_input_keeps_its_meaning_and_takes_the_model():
    pixels = np.array([[[[0, 100, 255]]]], "uint8")
    np.testing.assert_allclose(
        to_numpy(keras_vit.preprocess_input(pixels)), pixels / 127.5 - 1, atol=1e-7
    )
    model = tiny(preprocessing=dict(mean=CLIP_MEAN, std=CLIP_STD))
    expected = (pixels / 255.0 - np.array(CLIP_MEAN)) / np.array(CLIP_STD)
    got = to_numpy(keras_vit.preprocess_input(pixels, model=model))
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-6)


def test_set_preprocessing_is_validated_and_channels_checked():
    model = tiny()
    assert model.set_preprocessing(crop_pct=0.9).preprocessing.crop_pct == 0.9
    with pytest.raises(ValueError, match=r"crop_pct must be in \(0, 1\]"):
        model.set_preprocessing(crop_pct=0)
    with pytest.raises(ValueError, match=r"mean needs 1 or num_channels \(1\) values"):
        ViT(
            "mu/8",
            image_size=32,
            num_layers=1,
            num_channels=1,
            preprocessing=dict(mean=IMAGENET_MEAN, std=0.2),
        )
    with pytest.raises(ValueError, match="Unknown preprocessing fields"):
        tiny(preprocessing={"means": 0.5})
    with pytest.raises(ValueError, match="class_names needs one name per class"):
        tiny(class_names=["a", "b"])


def test_from_timm_reads_the_spec_beside_the_checkpoint_or_timms_table(tmp_path):
    arch = "vit_tiny_patch16_224"
    model = keras_vit.from_timm(arch, image_size=32, num_layers=1)
    # timm's default tag, augreg2_in21k_ft_in1k: mean = std = 0.5, bicubic, crop_pct 0.9.
    assert model.preprocessing.mean == (0.5,) * 3 and model.preprocessing.crop_pct == 0.9
    dinov2 = keras_vit.from_timm("vit_small_patch14_dinov2.lvd142m", image_size=28, num_layers=1)
    assert dinov2.preprocessing.mean == IMAGENET_MEAN
    folder = tmp_path / "hub"
    folder.mkdir()
    cfg = dict(DINOV2, mean=list(CLIP_MEAN), std=list(CLIP_STD), crop_mode="center")
    (folder / "config.json").write_text(json.dumps({"architecture": arch, "pretrained_cfg": cfg}))
    # timm's Hub layout: model.safetensors beside config.json.
    keras_vit.export_timm(
        keras_vit.from_timm(arch, image_size=32, num_layers=1), folder / "model.safetensors"
    )
    loaded = keras_vit.from_timm(
        arch, str(folder / "model.safetensors"), image_size=32, num_layers=1
    )
    assert loaded.preprocessing == PreprocessingConfig.from_timm(cfg)
    given = PreprocessingConfig()
    assert (
        keras_vit.from_timm(arch, image_size=32, num_layers=1, preprocessing=given).preprocessing
        == given
    )


def test_timm_class_names_of_an_imagenet_tag():
    from keras_vit.weights.timm.input_spec import timm_class_names

    names = timm_class_names("deit_tiny_patch16_224.fb_in1k")
    assert len(names) == 1000 and names[1] == "goldfish"
    assert timm_class_names("vit_base_patch16_224.augreg_in21k") is None  # not shipped


def test_from_huggingface_reads_preprocessor_config_and_id2label(tmp_path):
    folder = keras_vit.export_huggingface(tiny(), tmp_path / "vit")
    config = json.loads((tmp_path / "vit" / "config.json").read_text())
    config["id2label"] = {"0": "cat", "1": "dog", "2": "eel"}
    (tmp_path / "vit" / "config.json").write_text(json.dumps(config))
    default = keras_vit.from_huggingface(folder)
    assert default.preprocessing == PreprocessingConfig.from_huggingface(
        {"image_mean": [0.5] * 3, "image_std": [0.5] * 3, "resample": 2}, (32, 32)
    )
    assert default.config.class_names == ("cat", "dog", "eel")
    processor = {
        "image_processor_type": "BitImageProcessor",
        "size": {"shortest_edge": 36},
        "crop_size": {"height": 32, "width": 32},
        "do_center_crop": True,
        "resample": 3,
        "image_mean": list(IMAGENET_MEAN),
        "image_std": list(IMAGENET_STD),
    }
    (tmp_path / "vit" / "preprocessor_config.json").write_text(json.dumps(processor))
    model = keras_vit.from_huggingface(folder)
    spec = model.preprocessing
    assert (spec.resize, spec.interpolation, spec.mean) == (36, "bicubic", IMAGENET_MEAN)
    logits = np.zeros((1, 3), "float32")
    logits[0, 2] = 5.0
    best = keras_vit.decode_predictions(logits, top=1, model=model)[0][0]
    assert best[:2] == ("2", "eel")
    # Another image size keeps the processor's crop fraction.
    resized = keras_vit.from_huggingface(folder, image_size=48)
    assert resized.preprocessing.crop_pct == pytest.approx(32 / 36)


def test_exports_write_the_spec_out_for_timm_and_transformers(tmp_path):
    from tests.weights.references import import_timm

    timm = import_timm()
    spec = PreprocessingConfig.from_timm(DINOV2)
    model = ViT(
        "mu/8",
        image_size=32,
        num_layers=1,
        num_classes=3,
        approximate_gelu=False,
        preprocessing=spec,
    )
    (tmp_path / "config.json").write_text("{}")  # the user's: not replaced unasked
    with pytest.raises(FileExistsError, match="config.json"):
        keras_vit.export_timm(model, tmp_path / "model.safetensors", config_json=True)
    assert not (tmp_path / "model.safetensors").exists()
    keras_vit.export_timm(model, tmp_path / "model.safetensors", config_json=True, overwrite=True)
    hub = json.loads((tmp_path / "config.json").read_text())
    ours = timm.data.resolve_data_config({}, pretrained_cfg=hub["pretrained_cfg"])
    theirs = timm.data.resolve_data_config({}, pretrained_cfg=dict(DINOV2, input_size=(3, 32, 32)))
    assert ours.pop("crop_pct") == pytest.approx(theirs.pop("crop_pct"))
    assert {k: tuple(v) if isinstance(v, list) else v for k, v in ours.items()} == theirs
    folder = keras_vit.export_huggingface(model, tmp_path / "hf")
    written = json.loads((tmp_path / "hf" / "preprocessor_config.json").read_text())
    assert written["size"] == {"shortest_edge": 36} and written["resample"] == 3
    assert keras_vit.from_huggingface(folder).preprocessing.mean == IMAGENET_MEAN


def test_class_names_round_trip_through_timms_config_json_and_id2label(tmp_path):
    """export_timm(config_json=True) writes the head's class names as timm's top-level
    `label_names`; timm reads them (`create_model("local-dir:...")`), and so does from_timm of
    the folder. ImageNet-1k's go out as WordNet ids (timm's names for that set) with the
    readable names as `label_descriptions`, and come back readable. export_huggingface writes
    them as `id2label`."""
    from tests.weights.references import import_timm

    timm = import_timm()
    sizes = dict(image_size=32, num_layers=1)
    names = ("cat", "dog", "eel")
    model = keras_vit.from_timm("vit_tiny_patch16_224", num_classes=3, class_names=names, **sizes)
    folder = tmp_path / "repo"
    folder.mkdir()
    name, _ = keras_vit.export_timm(model, folder / "model.safetensors", config_json=True)
    written = json.loads((folder / "config.json").read_text())
    assert written["label_names"] == list(names) and "label_descriptions" not in written
    theirs = timm.create_model(f"local-dir:{folder}", pretrained=True)
    assert tuple(theirs.pretrained_cfg["label_names"]) == names
    again = keras_vit.from_timm(name, str(folder / "model.safetensors"), **sizes)
    assert again.config.class_names == names
    best = keras_vit.decode_predictions(np.float32([[0, 0, 9]]), top=1, model=again)[0][0]
    assert best[:2] == ("2", "eel")
    # ImageNet-1k: WordNet ids out, readable names back.
    imagenet = keras_vit.from_timm("vit_tiny_patch16_224", num_classes=1000, **sizes)
    from keras_vit.weights.imagenet import imagenet_classes

    imagenet.set_class_names(tuple(label for _, label in imagenet_classes()))
    folder = tmp_path / "in1k"
    folder.mkdir()
    keras_vit.export_timm(imagenet, folder / "model.safetensors", config_json=True)
    written = json.loads((folder / "config.json").read_text())
    assert written["label_names"][:2] == ["n01440764", "n01443537"]
    assert written["label_descriptions"]["n01443537"] == "goldfish"
    back = keras_vit.from_timm(name, str(folder / "model.safetensors"), **sizes)
    assert back.config.class_names == imagenet.config.class_names
    # Without label_names, 1000 classes are ImageNet-1k's, as timm infers them.
    del written["label_names"], written["label_descriptions"]
    (folder / "config.json").write_text(json.dumps(written))
    inferred = keras_vit.from_timm(name, str(folder / "model.safetensors"), **sizes)
    assert inferred.config.class_names == imagenet.config.class_names
    # transformers: id2label.
    hf = keras_vit.export_huggingface(tiny(class_names=names), tmp_path / "hf")
    assert json.loads((tmp_path / "hf" / "config.json").read_text())["id2label"]["2"] == "eel"
    assert keras_vit.from_huggingface(hf).config.class_names == names


def _source(images):
    tf = pytest.importorskip("tensorflow")
    from keras_vit.data.source import Source

    labels = np.arange(len(images)) % 3
    dataset = tf.data.Dataset.from_generator(
        lambda: zip(images, labels, strict=True),
        output_signature=(tf.TensorSpec((None, None, 3), tf.uint8), tf.TensorSpec((), tf.int64)),
    )
    return Source(dataset=dataset, num_examples=len(images), num_classes=3, name="test")


def test_eval_pipeline_with_a_dinov2_spec_gives_timms_eval_transform():
    from keras_vit import data

    spec = PreprocessingConfig.from_timm(DINOV2)
    images = [photo(45, 61, seed=3), photo(70, 40, seed=4)]
    source = _source(images)
    ds = data.eval_pipeline(source, image_size=32, batch_size=1, preprocessing=spec)
    for got, image in zip(ds.as_numpy_iterator(), images, strict=True):
        expected = timm_eval(DINOV2, 32, image)
        diff = np.abs(unnormalise(got[0][0], spec) - unnormalise(expected, spec))
        assert diff.max() <= PIXEL_TOLERANCE


def test_finetune_init_from_a_dinov2_model_feeds_timms_pixels(tmp_path):
    """`keras-vit finetune --init` keeps the source's spec and its pipelines apply it."""
    pytest.importorskip("tensorflow")
    from keras_vit.runner import finetune
    from keras_vit.runner.output import release_out
    from keras_vit.runner.setup import prepare_run

    spec = PreprocessingConfig.from_timm(DINOV2)
    source_path = str(tmp_path / "dinov2.keras")
    tiny(preprocessing=spec).save(source_path)
    config = finetune.get_config(smoke=True)
    config.update(
        init=source_path,
        image_size=32,
        dataset="synthetic:3:48:40",
        out=str(tmp_path / "run"),
        model_overrides=dict(num_layers=1),
    )
    setup = prepare_run(config)
    try:
        model, _ = finetune.build_model(3, config)
        assert model.preprocessing == spec  # the fine-tuned model carries it on
        assert setup.use_preprocessing(config, model) == spec
        batch = next(setup.eval_ds.as_numpy_iterator())[0]
        raw = next(setup.eval_source.dataset.batch(len(batch)).as_numpy_iterator())[0]
        for got, image in zip(batch, raw, strict=True):
            expected = timm_eval(DINOV2, 32, image)
            diff = np.abs(unnormalise(got, spec) - unnormalise(expected, spec))
            assert diff.max() <= PIXEL_TOLERANCE
        # The training pipeline normalises with the spec too (its values leave [-1, 1]).
        train = next(setup.train_ds.as_numpy_iterator())[0]
        lowest, highest = keras_vit.preprocessing.input_range(spec)
        assert train.min() >= lowest - 1e-5 and train.max() <= highest + 1e-5
        assert train.min() < -1.5
    finally:
        release_out(setup.out)


def test_litert_calibration_images_use_the_spec():
    from keras_vit.export.litert import representative_images

    spec = PreprocessingConfig.from_timm(DINOV2)
    pixels = np.zeros((1, 8, 8, 3), "uint8")
    images = representative_images(pixels, (8, 8, 3), preprocessing=spec)
    np.testing.assert_allclose(images[0, 0, 0], -np.array(IMAGENET_MEAN) / IMAGENET_STD, atol=1e-6)
    normalised = np.full((1, 8, 8, 3), -2.0, "float32")  # in the spec's range, not [-1, 1]
    assert representative_images(normalised, (8, 8, 3), preprocessing=spec).min() == -2.0
    with pytest.raises(ValueError, match=r"\[-1, 1\]"):
        representative_images(normalised, (8, 8, 3))


@pytest.mark.slow
def test_saved_model_serve_bytes_of_a_deit_import_answers_a_jpeg_as_timm(tmp_path):
    """A DeiT-style timm model imported with its config.json: serve_bytes on a JPEG gives
    timm's logits on the same (PIL-decoded) image, within the resize tolerance."""
    tf = pytest.importorskip("tensorflow")
    from PIL import Image

    from tests.export.test_saved_model import call, run_tf_only
    from tests.weights.references import import_timm, import_torch
    from tests.weights.timm_cases import perturb

    torch, timm = import_torch(), import_timm()
    name = "deit_tiny_patch16_224"
    reference = timm.create_model(
        name, pretrained=False, depth=1, embed_dim=32, num_heads=2, num_classes=3, img_size=32
    ).eval()
    perturb(torch, reference, seed=1)
    cfg = dict(timm.models.get_pretrained_cfg(name + ".fb_in1k").to_dict(), input_size=(3, 32, 32))
    folder = tmp_path / "deit"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"architecture": name, "pretrained_cfg": cfg}))
    from keras_vit.weights.state_dict import write_safetensors

    state = {k: v.detach().numpy().copy() for k, v in reference.state_dict().items()}
    path = write_safetensors(state, str(folder / "model.safetensors"))
    model = keras_vit.from_timm(
        name, path, image_size=32, num_layers=1, hidden_dim=32, num_heads=2, mlp_dim=128
    )
    assert model.preprocessing == PreprocessingConfig.from_timm(cfg)
    keras_vit.export_saved_model(model, tmp_path / "served", version=1, verbose=False)
    jpeg = tf.io.encode_jpeg(photo(50, 70, seed=5), quality=95).numpy()
    b64 = base64.b64encode(jpeg).decode("ascii")
    outputs, report = run_tf_only(
        tmp_path, [call("jpeg", str(tmp_path / "served" / "1"), "serve_bytes", b64=[b64])], {}
    )
    assert report["errors"] == {}
    decoded = tf.io.decode_jpeg(jpeg).numpy()  # the pixels serve_bytes saw
    transform = timm.data.create_transform(**timm.data.resolve_data_config({}, pretrained_cfg=cfg))
    with torch.no_grad():
        expected = reference(transform(Image.fromarray(decoded))[None]).numpy()
    # Exactly our own model on keras_vit's preprocessing of those pixels ...
    ours = to_numpy(model(model.preprocessor(decoded[None])))
    np.testing.assert_allclose(outputs["jpeg/logits"], ours, rtol=0, atol=1e-4)
    # ... and timm's logits within the resize tolerance (docs/weights.md).
    scale = np.abs(expected).max()
    assert np.abs(outputs["jpeg/logits"] - expected).max() <= 0.05 * scale


def test_serve_uint8_of_a_model_with_its_own_spec(tmp_path):
    pytest.importorskip("tensorflow")
    from tests.export.test_saved_model import call, run_tf_only

    model = tiny(preprocessing=dict(mean=CLIP_MEAN, std=CLIP_STD))
    randomize_weights(model, seed=2)
    keras_vit.export_saved_model(model, tmp_path / "served", version=1, verbose=False)
    pixels = np.random.default_rng(0).integers(0, 256, (2, 32, 32, 3), dtype=np.uint8)
    outputs, report = run_tf_only(
        tmp_path,
        [call("u8", str(tmp_path / "served" / "1"), "serve_uint8", input="pixels")],
        {"pixels": pixels},
    )
    assert report["errors"] == {}
    expected = to_numpy(model(keras_vit.preprocess_input(pixels, model=model)))
    np.testing.assert_allclose(outputs["u8/logits"], expected, rtol=0, atol=1e-5)
    assert keras.backend.backend() in ("jax", "tensorflow", "torch")


def test_a_crop_mode_the_preprocessor_lacks_warns_and_builds():
    """timm's crop_mode='border' (the DeepSeek towers' tags) never stops from_timm."""
    from keras_vit.weights.timm.input_spec import timm_input_spec

    with pytest.warns(UserWarning, match="crop_mode='border' has no form"):
        spec = timm_input_spec("deepseek_vit_412m.deepseek_v4_1_flash")
    assert spec.crop_mode == "center"


def test_a_flexivit_carries_its_backbones_spec(tmp_path):
    """FlexiViT (and `--patch-sizes` fine-tuning) feeds the backbone's spec, not [-1, 1]."""
    pytest.importorskip("tensorflow")
    from keras_vit.models.flexi import FlexiViT
    from keras_vit.runner import finetune
    from keras_vit.runner.output import release_out
    from keras_vit.runner.setup import prepare_run

    spec = PreprocessingConfig.from_timm(DINOV2)
    flexi = FlexiViT(tiny(preprocessing=spec), patch_sizes=(4, 8), seed=0)
    assert flexi.preprocessing == spec
    pixels = np.random.default_rng(0).integers(0, 256, (2, 32, 32, 3)).astype("float32")
    np.testing.assert_allclose(
        to_numpy(keras_vit.preprocess_input(pixels, model=flexi)),
        to_numpy(keras_vit.preprocess_input(pixels, model=flexi.backbone)),
    )
    assert tuple(flexi.preprocessor(pixels.astype("uint8")).shape) == (2, 32, 32, 3)
    path = str(tmp_path / "flexi.keras")
    flexi.save(path)
    assert keras_vit.load_model(path).preprocessing == spec
    assert keras_vit.with_patch_size(flexi, 4).preprocessing == spec
    source_path = str(tmp_path / "dinov2.keras")
    tiny(preprocessing=spec).save(source_path)
    config = finetune.get_config(smoke=True)
    config.update(init=source_path, image_size=32, dataset="synthetic:3:48:40", patch_sizes=[4, 8],
                  out=str(tmp_path / "run"), model_overrides=dict(num_layers=1))  # fmt: skip
    setup = prepare_run(config)
    try:
        model, _ = finetune.build_lora_model(3, config)  # the recipe's builder
        assert isinstance(model, FlexiViT)
        assert setup.use_preprocessing(config, model) == spec
        train = next(setup.train_ds.as_numpy_iterator())[0]
        assert train.min() < -1.5  # ImageNet-normalised, not [-1, 1]
    finally:
        release_out(setup.out)
