"""Issue 43's battery, loaders / arguments / inputs: every misuse answers clearly.

Each case asserts the error type and that the message names what was expected and what was
received (in the user's words: the argument or input they passed). The classes:

1. out-of-range / wrong-type `image_size`, `num_classes`, `patch_size` in every loader and
   builder (one check: `keras_vit.models.arguments`), and `num_classes=0` = no head everywhere;
2. integer checkpoint arrays for float weights (timm / HF state dicts, `.npz`);
3. unknown keys in the config dicts users write (NaFlexVitCfg dicts, `ViTConfig` dicts / kwargs);
4. NaFlex inputs at the model's entry (keys, dtypes, shapes, coordinates) and empty images;
5. misleading errors (a `.bin` holding safetensors, `FlexiViT` / `with_patch_size` arguments,
   corrupt shards, a truncated `.keras`, a quantized `--init` model, a plain ViT at another size);
6. a failed `predict` leaves the model usable (JAX detached its variables).
"""

import os
import zipfile

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit.data.naflex import naflex_batch
from keras_vit.models.config import ViTConfig
from keras_vit.runner.finetune import transfer_weights
from keras_vit.weights.convert import convert_checkpoint
from keras_vit.weights.huggingface.export import export_huggingface
from keras_vit.weights.npz.checkpoints import load_npz, save_npz
from keras_vit.weights.state_dict import read_state_dict, write_safetensors
from keras_vit.weights.timm.export import timm_state_dict
from keras_vit.weights.timm.naflex_config import from_timm_naflexvit, naflexvit_config
from keras_vit.weights.timm.reader import from_timm, timm_config

TIMM = "vit_tiny_patch16_224"
TINY = dict(num_layers=1, hidden_dim=16, mlp_dim=32, num_heads=2)
NAFLEX_CFG = dict(
    embed_dim=16, depth=1, num_heads=2, patch_size=4, pos_embed_grid_size=(4, 4), global_pool="avg"
)

# --- 1. arguments ------------------------------------------------------------------------------

BAD_ARGUMENTS = [
    ("image_size", 0, "image_size must be positive. Received: image_size=0"),
    ("image_size", -32, "image_size must be positive. Received: image_size=-32"),
    ("image_size", "32", "image_size must be an int or a pair of ints. Received: image_size='32'"),
    ("image_size", 32.0, "image_size must be an int or a pair of ints. Received: image_size=32.0"),
    ("image_size", (32, 32, 3), "pair of ints. Received: image_size=(32, 32, 3)"),
    ("num_classes", -3, "num_classes must be an int >= 0 (0: no classifier head). Received: "
                        "num_classes=-3"),
    ("num_classes", "10", "num_classes must be an int >= 0 (0: no classifier head). Received: "
                          "num_classes='10' (type str)"),
    ("num_classes", True, "Received: num_classes=True (type bool)"),
    ("num_classes", 10.0, "Received: num_classes=10.0 (type float)"),
    ("patch_size", 0, "patch_size must be positive. Received: patch_size=0"),
    ("patch_size", "8", "patch_size must be an int or a pair of ints. Received: patch_size='8'"),
]  # fmt: skip


@pytest.fixture(scope="module")
def hf_folder(tmp_path_factory):
    """A transformers ViT folder with a 3-way classifier (written by keras_vit's exporter)."""
    folder = str(tmp_path_factory.mktemp("hf") / "vit")
    model = keras_vit.ViT("mu/8", image_size=16, num_classes=3, **TINY)
    export_huggingface(model, folder)
    return folder


def _loaders(hf_folder):
    return {
        "ViT": lambda **kw: keras_vit.ViT("mu/8", **{"image_size": 16, **TINY, **kw}),
        "from_timm": lambda **kw: from_timm(TIMM, **{"image_size": 32, **TINY, **kw}),
        "timm_config": lambda **kw: timm_config(TIMM, **kw),
        "from_huggingface": lambda **kw: keras_vit.from_huggingface(hf_folder, **kw),
        "from_timm_naflexvit": lambda **kw: from_timm_naflexvit(NAFLEX_CFG, **kw),
        "naflexvit_config": lambda **kw: naflexvit_config(NAFLEX_CFG, **kw),
    }


@pytest.mark.parametrize("loader", list(_loaders("")))
@pytest.mark.parametrize("argument, value, message", BAD_ARGUMENTS)
def test_bad_arguments_refused_by_every_loader(hf_folder, loader, argument, value, message):
    if loader.startswith("naflex") or loader == "from_timm_naflexvit":
        if argument == "image_size":
            pytest.skip("NaFlex models take no image_size (any grid)")
    with pytest.raises(ValueError) as info:
        _loaders(hf_folder)[loader](**{argument: value})
    assert message in str(info.value)


@pytest.mark.parametrize("value", [-1, "10", True, (16,)])
def test_convert_checkpoint_checks_before_reading(tmp_path, value):
    # The arguments are checked before the (here missing) checkpoint is read.
    argument = "image_size" if isinstance(value, tuple) else "num_classes"
    with pytest.raises(ValueError, match=f"Received: {argument}="):
        convert_checkpoint("missing.npz", str(tmp_path / "m.keras"), model="mu/8",
                           **{argument: value})  # fmt: skip


def test_huggingface_num_classes_zero_is_headless_like_timm(hf_folder):
    hf = keras_vit.from_huggingface(hf_folder, num_classes=0)
    timm = from_timm(TIMM, num_classes=0, image_size=32, **TINY)
    assert hf.head is None and timm.head is None
    assert hf.output_shape == (None, 16) and timm.output_shape == (None, 16)
    assert keras_vit.from_huggingface(hf_folder).output_shape == (None, 3)  # the file's head


def test_vit_config_refuses_negative_classes_without_head():
    with pytest.raises(ValueError, match="Received: num_classes=-3"):
        keras_vit.ViT("mu/8", image_size=16, num_classes=-3, include_top=False)


# --- 2. dtypes ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def timm_model():
    return from_timm(TIMM, image_size=32, num_classes=3, **TINY)


def test_integer_timm_tensor_refused(timm_model):
    arrays = timm_state_dict(timm_model)
    arrays["blocks.0.norm1.weight"] = np.ones(16, "int64")
    with pytest.raises(ValueError) as info:
        from_timm(TIMM, arrays, image_size=32, **TINY)
    text = str(info.value)
    assert "blocks.0.norm1.weight: holds integers (dtype int64)" in text
    assert "encoderblock_0/attention_norm/gamma is float32: expected a float tensor" in text


def test_integer_safetensors_refused_and_float_cast_loads(timm_model, tmp_path):
    arrays = timm_state_dict(timm_model)
    arrays["head.bias"] = np.zeros(3, "int32")
    path = str(tmp_path / "model.safetensors")
    write_safetensors(arrays, path)
    with pytest.raises(ValueError, match=r"head\.bias: holds integers \(dtype int32\)"):
        from_timm(TIMM, path, image_size=32, **TINY)
    # Asked explicitly: cast, then load.
    floats = {k: v.astype("float32") for k, v in read_state_dict(path).items()}
    assert from_timm(TIMM, floats, image_size=32, **TINY).output_shape == (None, 3)


def test_integer_huggingface_tensor_refused(hf_folder, tmp_path):
    arrays = read_state_dict(os.path.join(hf_folder, "model.safetensors"))
    key = next(k for k in arrays if k.endswith("layernorm.weight"))
    arrays[key] = arrays[key].astype("int16")
    folder = tmp_path / "hf"
    folder.mkdir()
    (folder / "config.json").write_text(open(os.path.join(hf_folder, "config.json")).read())
    write_safetensors(arrays, str(folder / "model.safetensors"))
    name = key.removeprefix("vit.")
    with pytest.raises(ValueError, match=f"{name}: holds integers \\(dtype int16\\)"):
        keras_vit.from_huggingface(str(folder))


def test_integer_npz_array_refused(tmp_path):
    model = keras_vit.ViT("mu/8", image_size=16, num_classes=3, **TINY)
    path = str(tmp_path / "w.npz")
    save_npz(model, path)
    arrays = dict(np.load(path))
    arrays["head/bias"] = np.zeros(3, "int64")
    np.savez(path, **arrays)
    with pytest.raises(ValueError, match=r"head/bias: holds integers \(dtype int64\)"):
        load_npz(model, path)


# --- 3. strict config keys ---------------------------------------------------------------------


def test_naflex_config_misspelled_key_named_with_nearest():
    with pytest.raises(ValueError) as info:
        from_timm_naflexvit({**NAFLEX_CFG, "dept": 1})
    assert "unknown keys ['dept'] ('dept': did you mean 'depth'?)" in str(info.value)


def test_vit_arguments_misspelled_key_named_with_nearest():
    with pytest.raises(TypeError, match=r"'num_layer': did you mean 'num_layers'"):
        keras_vit.ViT("mu/8", image_size=16, num_layer=1)
    fields = ViTConfig.from_variant("mu/8", image_size=16).to_dict()
    with pytest.raises(TypeError, match=r"\['hiden_dim'\] \('hiden_dim': did you mean 'hidden_"):
        ViTConfig.from_dict({**fields, "hiden_dim": 8})


def test_huggingface_config_extra_fields_are_ignored(hf_folder, tmp_path):
    # The rule: third-party config.json files carry fields keras_vit does not read (transformers
    # writes many); only the dicts and keyword arguments users write to keras_vit are strict.
    import json
    import shutil

    folder = tmp_path / "hf"
    shutil.copytree(hf_folder, folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "some_new_field": 1}))
    assert keras_vit.from_huggingface(str(folder)).output_shape == (None, 3)


# --- 4. NaFlex inputs --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def naflex():
    model = from_timm_naflexvit(NAFLEX_CFG, num_classes=3)
    images = [np.random.rand(16, 12, 3).astype("float32"), np.random.rand(8, 8, 3)]
    return model, naflex_batch(images, 4, 16)


def _edit(batch, key, change):
    value = np.array(batch[key])
    return {**batch, key: change(value)}


def _set(index, to):
    def change(value):
        value[index] = to
        return value

    return change


NAFLEX_CASES = {
    "missing patch_valid": (
        lambda b: {k: b[k] for k in ("patches", "patch_coord")},
        ["exactly the keys ['patches', 'patch_coord', 'patch_valid']", "missing ['patch_valid']"],
    ),
    "extra key": (
        lambda b: {**b, "mask": b["patch_valid"]},
        ["exactly the keys", "unexpected ['mask']"],
    ),
    "not a dict": (lambda b: b["patches"], ["takes a dict with the keys", "ndarray"]),
    "short patch_coord": (
        lambda b: _edit(b, "patch_coord", lambda v: v[:, :5]),
        ["same token count N", "patch_coord (2, 5, 2)", "patches (2, 16, 48)"],
    ),
    "narrow patches": (
        lambda b: _edit(b, "patches", lambda v: v[:, :, :20]),
        ["patches must have shape (B, N, 48)", "Received: patches of shape (2, 16, 20)"],
    ),
    "batch sizes": (
        lambda b: _edit(b, "patch_valid", lambda v: v[:1]),
        ["same batch size B", "patch_valid (1, 16)"],
    ),
    "float coordinates": (
        lambda b: _edit(b, "patch_coord", lambda v: v.astype("float32")),
        ["patch_coord must be an integer array", "dtype float32"],
    ),
    "negative coordinate": (
        lambda b: _edit(b, "patch_coord", _set((0, 0), (-1, 0))),
        ["patch_coord must be >= 0 on valid tokens", "patch_coord[0, 0] = [-1, 0]"],
    ),
    "past the grid": (
        lambda b: _edit(b, "patch_coord", _set((0, 0), (9, 0))),
        ["must fill its patch grid", "10 x 3 patches", "largest patch_coord [9, 2]"],
    ),
}


@pytest.mark.parametrize("case", list(NAFLEX_CASES))
@pytest.mark.parametrize("entry", ["predict", "call"])
def test_naflex_inputs_refused_at_the_entry(naflex, case, entry):
    model, batch = naflex
    make, expected = NAFLEX_CASES[case]
    bad = make(batch)
    with pytest.raises(ValueError) as info:
        if entry == "predict":
            model.predict(bad, verbose=0)
        else:
            model(bad)
    for part in expected:
        assert part in str(info.value)
    assert "vit_b4" in str(info.value) or "naflexvit" in str(info.value)
    # The model answers the next good batch (on JAX too).
    np.testing.assert_allclose(
        model.predict(batch, verbose=0), keras.ops.convert_to_numpy(model(batch)), atol=1e-5
    )


def test_naflex_batch_from_naflex_batch_passes(naflex):
    model, batch = naflex
    assert model.predict(batch, verbose=0).shape == (2, 3)


def test_empty_image_refused_in_batch_and_dataset():
    with pytest.raises(ValueError, match=r"at least 1 pixel. Received: images\[0\] of shape"):
        naflex_batch([np.zeros((0, 8, 3))], 4, 16)
    from keras_vit.data.naflex_tf import naflex_example

    with pytest.raises(ValueError, match="at least 1 pixel. Received: an image of shape"):
        naflex_example(np.zeros((0, 8, 3), "float32"), 4, 16)


# --- 5. misleading errors ----------------------------------------------------------------------


def test_safetensors_named_bin_is_read_by_content(timm_model, tmp_path):
    path = str(tmp_path / "pytorch_model.bin")
    write_safetensors(timm_state_dict(timm_model), path)
    model = from_timm(TIMM, path, image_size=32, **TINY)
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(model.head.kernel),
        keras.ops.convert_to_numpy(timm_model.head.kernel),
    )


def test_two_corrupt_shards_both_named(timm_model, tmp_path):
    import json

    arrays = timm_state_dict(timm_model)
    names = sorted(arrays)
    half = len(names) // 2
    for shard, part in (("a.safetensors", names[:half]), ("b.safetensors", names[half:])):
        write_safetensors({k: arrays[k] for k in part}, str(tmp_path / shard))
        with open(tmp_path / shard, "r+b") as f:
            f.truncate(100)
    index = {"weight_map": {k: "a.safetensors" if k in names[:half] else "b.safetensors"
                            for k in names}}  # fmt: skip
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(ValueError) as info:
        read_state_dict(str(tmp_path / "model.safetensors.index.json"))
    text = str(info.value)
    assert "2 of the 2 shards" in text and "a.safetensors:" in text and "b.safetensors:" in text


def test_flexivit_string_patch_sizes_named():
    model = keras_vit.ViT("mu/8", image_size=16, num_classes=3, **TINY)
    with pytest.raises(ValueError, match=r"not a string. Received: patch_sizes='4,8'"):
        keras_vit.FlexiViT(model, patch_sizes="4,8")
    with pytest.raises(ValueError, match=r"patch_sizes must be positive. Received: patch_sizes=0"):
        keras_vit.FlexiViT(model, patch_sizes=(4, 0))


@pytest.mark.parametrize("what", ["FlexiViT", "with_patch_size"])
def test_naflex_model_refused_by_patch_resizing(naflex, what):
    model, _ = naflex
    with pytest.raises(ValueError) as info:
        if what == "FlexiViT":
            keras_vit.FlexiViT(model, patch_sizes=(2, 4))
        else:
            keras_vit.with_patch_size(model, 2)
    assert f"{what} takes a ViT of images" in str(info.value)
    assert "with naflex=True" in str(info.value)


def test_with_patch_size_checks_its_arguments():
    model = keras_vit.ViT("mu/8", image_size=16, num_classes=3, **TINY)
    with pytest.raises(ValueError, match="Received: patch_size=0"):
        keras_vit.with_patch_size(model, 0)


def test_truncated_weights_in_keras_file_name_the_file(tmp_path):
    path = str(tmp_path / "m.keras")
    keras_vit.ViT("mu/8", image_size=16, num_classes=3, **TINY).save(path)
    with zipfile.ZipFile(path) as archive:
        items = {name: archive.read(name) for name in archive.namelist()}
    bad = str(tmp_path / "bad.keras")
    with zipfile.ZipFile(bad, "w") as archive:
        for name, data in items.items():
            archive.writestr(name, data[: len(data) // 2] if name.endswith(".h5") else data)
    with pytest.raises(ValueError) as info:
        keras_vit.load_model(bad)
    assert repr(bad) in str(info.value) and "model.weights.h5 cannot be read" in str(info.value)


def test_quantized_init_model_said_to_be_quantized():
    source = keras_vit.ViT("mu/8", image_size=16, num_classes=3, **TINY)
    keras_vit.quantize(source, "int8")
    target = keras_vit.ViT("mu/8", image_size=16, num_classes=5, **TINY)
    with pytest.raises(ValueError) as info:
        transfer_weights(source, target)
    assert "is quantized" in str(info.value) and "(int8)" in str(info.value)
    assert "weight shapes differ" not in str(info.value)


@pytest.mark.parametrize("size", [24, 32])
def test_plain_vit_other_image_size_same_words_on_every_backend(size):
    model = keras_vit.ViT("mu/8", image_size=16, num_classes=3, **TINY)
    images = np.zeros((1, size, size, 3), "float32")
    with pytest.raises(ValueError) as info:
        model.predict(images, verbose=0)
    assert "takes images of height 16 and width 16" in str(info.value)
    assert f"Received: images of shape (1, {size}, {size}, 3)" in str(info.value)
    assert model.predict(np.zeros((1, 16, 16, 3), "float32"), verbose=0).shape == (1, 3)


# --- 6. a failed predict leaves the model usable -----------------------------------------------


def test_model_usable_after_a_failure_inside_predict():
    # A failure the entry check cannot see ahead (a generator's batch, checked while Keras
    # traces its step function): the model still predicts afterwards, on every backend.
    model = keras_vit.ViT("mu/8", image_size=16, num_classes=3, **TINY)
    good = np.zeros((2, 16, 16, 3), "float32")
    expected = model.predict(good, verbose=0)

    class Batches(keras.utils.PyDataset):
        def __len__(self):
            return 1

        def __getitem__(self, index):
            return np.zeros((2, 24, 24, 3), "float32")

    with pytest.raises(ValueError, match="takes images of height 16 and width 16"):
        model.predict(Batches(), verbose=0)
    np.testing.assert_allclose(model.predict(good, verbose=0), expected, atol=1e-6)
