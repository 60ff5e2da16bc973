import keras
import numpy as np

from keras_vit.models.vit import ViT
from keras_vit.training.optimizers import build_loss, build_optimizer
from keras_vit.training.schedules import WarmupDecay


def test_mixed_bfloat16_tiny_model_trains_with_float32_variables():
    # bf16 matmuls are ~140x slower than fp32 on these CPUs: one layer, width 16, 8 px, 2 steps.
    keras.config.set_dtype_policy("mixed_bfloat16")
    model = ViT("mu/4", image_size=8, num_classes=3, num_layers=1, hidden_dim=16, mlp_dim=16)
    model.compile(
        build_optimizer("adamw", WarmupDecay(1e-3, 2, 1), weight_decay=0.1), build_loss(0.1)
    )
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, (4, 8, 8, 3)).astype("float32")
    y = np.eye(3, dtype="float32")[[0, 1, 2, 0]]
    history = model.fit(x, y, batch_size=2, epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"]).all()
    assert all(v.dtype == "float32" for v in model.trainable_variables)
    assert model.get_layer("encoderblock_0").compute_dtype == "bfloat16"
