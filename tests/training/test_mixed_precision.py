"""Mixed precision (`mixed_bfloat16`, and `mixed_float16` with loss scaling) on a tiny model."""

import keras
import numpy as np
import pytest

from keras_vit.models.vit import ViT
from keras_vit.training.optimizers import build_loss, build_optimizer
from keras_vit.training.schedules import WarmupDecay

# XLA's CPU compiler has no float16 x float16 -> float32 dot, which the jitted gradient of
# `keras.ops.dot_product_attention` (the attention's kernel) asks for under mixed_float16 on JAX
# (a CPU-only limit: GPUs have it).
JAX_CPU_FLOAT16 = "The precision 'F16_F16_F32' is not supported by dot_general on CPU"


@pytest.mark.parametrize("policy", ["mixed_bfloat16", "mixed_float16"])
def test_mixed_precision_tiny_model_trains_with_float32_variables_and_logits(policy):
    # bf16 / fp16 matmuls are ~140x slower than fp32 on these CPUs: one layer, width 16, 8 px.
    keras.config.set_dtype_policy(policy)
    keras.utils.set_random_seed(0)
    model = ViT("mu/4", image_size=8, num_classes=3, num_layers=1, hidden_dim=16, mlp_dim=16)
    model.compile(
        build_optimizer("adamw", WarmupDecay(1e-2, 8, 1), weight_decay=0.1), build_loss(0.1)
    )
    # Keras wraps the optimizer in a dynamic LossScaleOptimizer under mixed_float16 (on every
    # backend: `Trainer.compile`), and leaves it alone under mixed_bfloat16.
    scaled = isinstance(model.optimizer, keras.optimizers.LossScaleOptimizer)
    assert scaled == (policy == "mixed_float16")
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, (4, 8, 8, 3)).astype("float32")
    y = np.eye(3, dtype="float32")[[0, 1, 2, 0]]
    # The blocks compute in half precision; the head gives float32 logits.
    assert model.get_layer("encoderblock_0").compute_dtype == policy.split("_")[1]
    assert keras.backend.standardize_dtype(model(x).dtype) == "float32"
    try:
        history = model.fit(x, y, batch_size=4, epochs=8, verbose=0)
    except ValueError as e:
        if keras.backend.backend() == "jax" and JAX_CPU_FLOAT16 in str(e):
            pytest.skip(f"XLA on CPU: {JAX_CPU_FLOAT16} (dot_product_attention's gradient)")
        raise
    losses = history.history["loss"]
    assert np.isfinite(losses).all() and losses[-1] < losses[0] - 0.1, losses
    assert all(v.dtype == "float32" for v in model.trainable_variables)
    if scaled:  # no step was skipped for an overflow, and the scale stayed at its 2**15 start
        # (seeded: unseeded weights made TensorFlow skip a first overflowing step now and then,
        # which dynamic loss scaling is allowed to do)
        inner = keras.ops.convert_to_numpy(model.optimizer.inner_optimizer.iterations)
        assert int(inner) == 8
        scale = float(keras.ops.convert_to_numpy(model.optimizer.dynamic_scale))
        assert scale == 2.0**15, scale
