"""Layer-wise learning-rate decay: each variable's update equals its reference optimizer's."""

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit.training import build_optimizer
from keras_vit.training.layer_decay import (
    LayerDecayAdamW,
    layer_decay_multipliers,
    layer_depths,
    no_weight_decay_paths,
    with_layer_decay,
)
from keras_vit.training.schedules import WarmupDecay

DECAY = 0.5


def tiny(**kwargs):
    return keras_vit.ViT("mu/8", image_size=16, num_layers=2, num_classes=3, **kwargs)


def test_depths_follow_the_blocks():
    model = tiny(distillation_token=True)
    depths = layer_depths(model)
    assert depths["patch_encoder/kernel"] == 0
    assert depths["patch_encoder/distillation_embedding"] == 0
    assert depths["patch_encoder/position_embeddings"] == 0
    blocks = [p for p in depths if p.startswith("encoderblock_1/")]
    assert blocks and {depths[p] for p in blocks} == {2}
    assert depths["encoder_norm/gamma"] == 3 and depths["head_dist/kernel"] == 3
    mult = layer_decay_multipliers(model, DECAY)
    assert mult["head/kernel"] == 1.0
    assert mult[blocks[0]] == DECAY  # last block: lr * decay ** (L - i) with i = L - 1
    assert mult["patch_encoder/kernel"] == DECAY**3  # embeddings: decay ** (L + 1)
    assert set(mult) == {v.path for v in model.trainable_variables}


@pytest.mark.slow
def test_hybrid_stem_is_an_embedding():
    model = keras_vit.ViT("mu/1", num_layers=1, resnet_units=(1, 1),
                          resnet_width=8, resnet_groups=4, image_size=32, num_classes=5)
    depths = layer_depths(model)
    paths = [v.path for v in model.trainable_variables]
    stem = [p for p in paths if p.startswith(("conv_root", "gn_root"))]
    assert stem and {depths[p] for p in stem} == {0}
    assert depths["head/kernel"] == 2


def test_no_weight_decay_for_norms_biases_tokens():
    model = tiny()
    skip = set(no_weight_decay_paths(model))
    assert {"patch_encoder/class_embedding", "patch_encoder/position_embeddings",
            "patch_encoder/bias", "encoder_norm/gamma", "head/bias"} <= skip
    assert "patch_encoder/kernel" not in skip and "head/kernel" not in skip


@pytest.mark.parametrize("name", ["adamw", "adam", "sgd"])
def test_each_variable_steps_as_its_reference(name):
    keras.utils.set_random_seed(0)
    model = tiny()
    schedule = WarmupDecay(0.1, total_steps=10, warmup_steps=2, decay="cosine")
    wd = 0.05 if name == "adamw" else 0.0
    base = build_optimizer(name, schedule, weight_decay=wd, global_clipnorm=None)
    opt = with_layer_decay(base, model, DECAY)
    opt.build(model.trainable_variables)
    mult = opt.lr_multipliers
    skip = set(opt.no_weight_decay)
    rng = np.random.default_rng(0)
    values = [keras.ops.convert_to_numpy(v) for v in model.trainable_variables]
    grads = [keras.ops.convert_to_tensor(rng.normal(size=v.shape).astype("float32"))
             for v in values]
    for _ in range(3):  # three steps: warm-up then decay, moments accumulate
        opt.apply(grads, model.trainable_variables)
    for variable, value, grad in zip(model.trainable_variables, values, grads, strict=True):
        ref_schedule = WarmupDecay(0.1 * mult[variable.path], total_steps=10, warmup_steps=2,
                                   decay="cosine")
        ref_wd = 0.0 if variable.path in skip else wd
        ref = build_optimizer(name, ref_schedule, weight_decay=ref_wd, global_clipnorm=None)
        ref_var = keras.Variable(value)
        ref.build([ref_var])
        for _ in range(3):
            ref.apply([grad], [ref_var])
        np.testing.assert_allclose(
            keras.ops.convert_to_numpy(variable), keras.ops.convert_to_numpy(ref_var),
            rtol=1e-5, atol=1e-6, err_msg=variable.path,
        )


def test_fit_and_keras_round_trip(tmp_path):
    model = tiny()
    model.compile(with_layer_decay(keras.optimizers.AdamW(1e-3), model, DECAY), "mse")
    x = np.random.default_rng(0).normal(size=(4, 16, 16, 3)).astype("float32")
    model.fit(x, np.zeros((4, 3)), epochs=1, verbose=0)
    path = str(tmp_path / "m.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    assert isinstance(loaded.optimizer, LayerDecayAdamW)
    assert loaded.optimizer.lr_multipliers == model.optimizer.lr_multipliers
    assert loaded.optimizer.no_weight_decay == model.optimizer.no_weight_decay
    loaded.fit(x, np.zeros((4, 3)), epochs=1, verbose=0)


def test_errors():
    model = tiny()
    with pytest.raises(ValueError, match="must be in \\(0, 1\\]"):
        with_layer_decay(keras.optimizers.SGD(0.1), model, 1.5)
    with pytest.raises(ValueError, match="AdamW, Adam or SGD. Received: RMSprop"):
        with_layer_decay(keras.optimizers.RMSprop(0.1), model, 0.5)
    with pytest.raises(ValueError, match="transformer blocks"):
        inputs = keras.Input((4,))
        dense = keras.Model(inputs, keras.layers.Dense(2)(inputs))
        with_layer_decay(keras.optimizers.SGD(0.1), dense, 0.5)
