"""Shared test helpers: a layer's config and `.keras` round-trip checks, a NumPy reference ViT.

The full per-layer check (config, serialization, weights, shapes, a training step, mixed
precision) is `tests.layer_harness.run_layer_test`, which every layer test calls.
"""

import functools
import inspect
import math
import os

import keras
import numpy as np
import pytest

from tests.xla_test_flags import with_test_flags

# CI runs the suite once per backend. A test whose code cannot differ by backend (it runs no
# Keras: argument parsing, name tables, docs text, a subprocess that never imports Keras or names
# its own backend) is marked so; each use says why. It runs in one backend's run only (the run of
# KERAS_VIT_ONCE_BACKEND, which scripts/run_tests.sh sets to the first backend it runs; unset,
# every run runs it), and tests/backend_guard.py fails it if it touches the Keras backend after
# all (a variable, a layer, an op, the backend's name, a Keras object from a fixture, Keras in a
# subprocess without its own KERAS_BACKEND). Registered in pyproject.toml; see CONTRIBUTING.md.
backend_independent = pytest.mark.backend_independent


def xla_flags(devices=None):
    """XLA_FLAGS for a test's JAX subprocess: the tests' flags (tests/xla_test_flags.py), and
    `devices` CPU devices."""
    flags = with_test_flags()
    if devices is None:
        return flags
    return f"--xla_force_host_platform_device_count={devices} {flags}"


def to_numpy(x):
    return keras.ops.convert_to_numpy(x)


def check_config_complete(layer):
    """get_config() holds exactly the __init__ arguments (plus the base Layer ones)."""
    config = layer.get_config()
    params = [
        p for p in inspect.signature(type(layer).__init__).parameters if p not in ("self", "kwargs")
    ]
    missing = [p for p in params if p not in config]
    assert not missing, f"{type(layer).__name__}.get_config() misses {missing}"
    base = set(keras.layers.Layer().get_config())
    extra = set(config) - set(params) - base
    assert not extra, f"{type(layer).__name__}.get_config() has derived keys {extra}"
    clone = type(layer).from_config(config)
    assert clone.get_config() == config


def roundtrip_model(model, inputs, tmp_path):
    """Saves `model` as .keras, loads it, checks identical outputs; returns the loaded model."""
    path = str(tmp_path / "model.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    np.testing.assert_array_equal(to_numpy(model(inputs)), to_numpy(loaded(inputs)))
    return loaded


def roundtrip_layer(layer, inputs, tmp_path, **call_kwargs):
    """Saves a one-layer functional model as .keras and checks identical outputs after loading."""
    x = keras.Input(inputs.shape[1:])
    roundtrip_model(keras.Model(x, layer(x, **call_kwargs)), inputs, tmp_path)


# --- plain NumPy reference of the paper's equations -------------------------------------------


def np_layer_norm(x, scale, bias, eps=1e-6):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * scale + bias


def np_gelu(x, approximate=True):
    if approximate:
        return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))
    from scipy.special import erf

    return 0.5 * x * (1 + erf(x / np.sqrt(2)))


def np_softmax(x, axis=-1):
    x = x - x.max(axis, keepdims=True)
    e = np.exp(x)
    return e / e.sum(axis, keepdims=True)


def np_quick_gelu(x):
    return x / (1 + np.exp(-1.702 * x))


def np_activation(x, activation="gelu", approximate_gelu=True):
    return np_quick_gelu(x) if activation == "quick_gelu" else np_gelu(x, approximate_gelu)


def np_msa(x, p, eps=1e-6):
    """Multi-head self-attention with official-layout weights (D,H,Dh) / (H,Dh,D).

    With `"query_norm/scale"` etc. in `p`: LayerNorm over the head width on q and k (QK-norm);
    with `"attention_bias"` `(1, heads, T, T)`: added to the logits (relative position bias).
    """
    q = np.einsum("btd,dhk->bthk", x, p["query/kernel"]) + p["query/bias"]
    k = np.einsum("btd,dhk->bthk", x, p["key/kernel"]) + p["key/bias"]
    v = np.einsum("btd,dhk->bthk", x, p["value/kernel"]) + p["value/bias"]
    if "query_norm/scale" in p:
        q = np_layer_norm(q, p["query_norm/scale"], p["query_norm/bias"], eps)
        k = np_layer_norm(k, p["key_norm/scale"], p["key_norm/bias"], eps)
    logits = np.einsum("bqhk,bshk->bhqs", q, k) / math.sqrt(q.shape[-1])
    weights = np_softmax(logits + p.get("attention_bias", 0.0))
    out = np.einsum("bhqs,bshk->bqhk", weights, v)
    return np.einsum("bqhk,hkd->bqd", out, p["out/kernel"]) + p["out/bias"], weights


def np_block(x, p, eps=1e-6, approximate_gelu=True, activation="gelu", post=False):
    """Eq. 2-3: z' = MSA(LN(z)) + z; z = MLP(LN(z')) + z' (LayerScale `ls1`/`ls2` if in `p`).

    `post`: residual post-norm, z' = LN(MSA(z)) + z; z = LN(MLP(z')) + z' (timm's ResPostBlock).
    """
    ln0 = functools.partial(np_layer_norm, scale=p["ln0/scale"], bias=p["ln0/bias"], eps=eps)
    ln2 = functools.partial(np_layer_norm, scale=p["ln2/scale"], bias=p["ln2/bias"], eps=eps)
    y, weights = np_msa(x if post else ln0(x), p, eps)
    x = x + (ln0(y) if post else y) * p.get("ls1", 1.0)
    y = x if post else ln2(x)
    y = np_activation(y @ p["mlp0/kernel"] + p["mlp0/bias"], activation, approximate_gelu)
    if "mlp_inner_norm/scale" in p:  # BEiT-3: a norm of the hidden activations
        y = np_layer_norm(y, p["mlp_inner_norm/scale"], p["mlp_inner_norm/bias"], eps)
    y = y @ p["mlp1/kernel"] + p["mlp1/bias"]
    return x + (ln2(y) if post else y) * p.get("ls2", 1.0), weights


def np_relative_position_index(grid):
    """BEiT's table row of each (query, key) pair, a class token first, written pair by pair."""
    h, w = grid
    cells = [(r, c) for r in range(h) for c in range(w)]
    n = (2 * h - 1) * (2 * w - 1)
    out = np.zeros((len(cells) + 1,) * 2, "int32")
    for i, (ri, ci) in enumerate(cells):
        for j, (rj, cj) in enumerate(cells):
            out[1 + i, 1 + j] = (ri - rj + h - 1) * (2 * w - 1) + (ci - cj + w - 1)
    out[0, :], out[:, 0], out[0, 0] = n, n + 1, n + 2
    return out


def np_relative_position_bias(table, grid):
    """`(1, heads, T, T)` of a `(rows, heads)` BEiT table."""
    return np.transpose(np.asarray(table)[np_relative_position_index(grid)], (2, 0, 1))[None]


def np_relative_position_mlp(layer, grid, prefix):
    """`(1, heads, T, T)` of timm's RelPosMlp ('cr'), pair by pair, from a layer's weights."""
    n = lambda v: to_numpy(v).astype("float64")  # noqa: E731
    w1, b1, w2, b2 = n(layer.fc1.kernel), n(layer.fc1.bias), n(layer.fc2.kernel), n(layer.fc2.bias)
    cells = [(r, c) for r in range(grid[0]) for c in range(grid[1])]
    t = len(cells) + prefix
    out = np.zeros((w2.shape[1], t, t))
    for i, (ri, ci) in enumerate(cells):
        for j, (rj, cj) in enumerate(cells):
            d = np.array([ri - rj, ci - cj], "float64")
            coords = np.sign(d) * np.log1p(np.abs(d))
            out[:, prefix + i, prefix + j] = np.maximum(coords @ w1 + b1, 0) @ w2 + b2
    return out[None]


def _np_bias_of(layer, grid, prefix):
    if hasattr(layer, "fc1"):
        return np_relative_position_mlp(layer, grid, prefix)
    return np_relative_position_bias(to_numpy(layer.relative_position_bias_table), grid)


def block_params(block, branch=None):
    """Reads a TransformerBlock's weights into the NumPy reference's names.

    `branch`: one of `block.branches()` (a parallel block's branch); defaults to branch 0.
    """
    branch = branch or block.branches()[0]
    att = branch["attention"]
    n = to_numpy
    return {
        "ln0/scale": n(branch["attention_norm"].gamma),
        "ln0/bias": n(branch["attention_norm"].beta),
        "query/kernel": n(att.query_dense.kernel),
        "query/bias": n(att.query_dense.bias),
        "key/kernel": n(att.key_dense.kernel),
        "key/bias": n(att.key_dense.bias) if att.key_bias else np.zeros(att.head_dim),
        "value/kernel": n(att.value_dense.kernel),
        "value/bias": n(att.value_dense.bias),
        "out/kernel": n(att.output_dense.kernel),
        "out/bias": n(att.output_dense.bias),
        "ln2/scale": n(branch["mlp_norm"].gamma),
        "ln2/bias": n(branch["mlp_norm"].beta),
        **(
            {
                "mlp0/kernel": n(branch["mlp_dense_1"].kernel),
                "mlp0/bias": n(branch["mlp_dense_1"].bias),
                "mlp1/kernel": n(branch["mlp_dense_2"].kernel),
                "mlp1/bias": n(branch["mlp_dense_2"].bias),
            }
            if block.mlp == "mlp"
            else {}
        ),
        **(
            {
                "mlp_inner_norm/scale": n(block.mlp_hidden_norm.gamma),
                "mlp_inner_norm/bias": n(block.mlp_hidden_norm.beta),
            }
            if block.mlp == "mlp" and block.mlp_inner_norm
            else {}
        ),
        **(
            {
                "query_norm/scale": n(att.query_norm.gamma),
                "query_norm/bias": n(att.query_norm.beta),
                "key_norm/scale": n(att.key_norm.gamma),
                "key_norm/bias": n(att.key_norm.beta),
            }
            if getattr(att, "qk_norm", False)
            else {}
        ),
        **(
            {
                "ls1": n(branch["attention_scale"]),
                "ls2": n(branch["mlp_scale"]) if "mlp_scale" in branch else 1.0,
            }
            if block.layer_scale_init_value is not None
            else {}
        ),
    }


def np_parallel_block(x, block, eps=1e-6, approximate_gelu=True, activation="gelu", bias=0.0):
    """timm's ParallelThingsBlock: x + sum_j MSA_j(LN_j(x)); then + sum_j MLP_j(LN_j(x))."""
    branches = [
        {k: np.asarray(v, "float64") for k, v in block_params(block, b).items()}
        for b in block.branches()
    ]
    for p in branches:
        p["attention_bias"] = bias
    y = sum(
        np_msa(np_layer_norm(x, p["ln0/scale"], p["ln0/bias"], eps), p, eps)[0] * p.get("ls1", 1.0)
        for p in branches
    )
    x = x + y
    total = 0.0
    for p in branches:
        y = np_layer_norm(x, p["ln2/scale"], p["ln2/bias"], eps)
        y = np_activation(y @ p["mlp0/kernel"] + p["mlp0/bias"], activation, approximate_gelu)
        total = total + (y @ p["mlp1/kernel"] + p["mlp1/bias"]) * p.get("ls2", 1.0)
    return x + total


def np_standardize(kernel, epsilon=1e-5):
    """StdConv2D's kernel: per output channel over (kh, kw, C_in), population std + epsilon."""
    kernel = kernel - kernel.mean(axis=(0, 1, 2), keepdims=True)
    return kernel / (kernel.std(axis=(0, 1, 2), keepdims=True) + epsilon)


def same_pads(size, k, s):
    """TF / lax 'SAME' padding of one axis: (before, after, output size)."""
    out = -(-size // s)
    total = max((out - 1) * s + k - size, 0)
    return total // 2, total - total // 2, out


def np_conv_same(x, w, stride):
    """TF / lax 'SAME' convolution, NHWC input, HWIO kernel, loops over kernel taps."""
    kh, kw, _, cout = w.shape
    b, h, wd, _ = x.shape
    top, bottom, oh = same_pads(h, kh, stride)
    left, right, ow = same_pads(wd, kw, stride)
    xp = np.pad(x, ((0, 0), (top, bottom), (left, right), (0, 0)))
    out = np.zeros((b, oh, ow, cout), np.float64)
    for i in range(kh):
        for j in range(kw):
            patch = xp[:, i : i + stride * oh : stride, j : j + stride * ow : stride, :]
            out += patch @ w[i, j]
    return out


def np_patches(images, patch):
    b, h, w, c = images.shape
    ph, pw = (patch, patch) if isinstance(patch, int) else patch
    out = np.zeros((b, (h // ph) * (w // pw), ph * pw * c), images.dtype)
    n = 0
    for i in range(h // ph):
        for j in range(w // pw):
            out[:, n] = images[:, i * ph : (i + 1) * ph, j * pw : (j + 1) * pw, :].reshape(b, -1)
            n += 1
    return out


def randomize_weights(model, seed=0, scale=0.2):
    """Gives every weight random values (the zero-initialised head included)."""
    rng = np.random.default_rng(seed)
    for w in model.weights:
        value = rng.normal(0.0, scale, size=tuple(w.shape)).astype("float32")
        if w.path.endswith(("gamma", "scale")):
            value += 1.0
        w.assign(value)


# --- the architecture options of timm's / Hugging Face's ViT families, in NumPy ---------------


def np_map_head(x, p, num_heads, eps=1e-6, activation="gelu", approximate_gelu=True):
    """timm `AttentionPoolLatent` (latent length 1) on `(B, N, D)` tokens: `(B, D)`."""
    b, _, d = x.shape
    dh = d // num_heads
    q = (p["latent"] @ p["q/kernel"] + p["q/bias"]).reshape(1, 1, num_heads, dh)
    kv = x @ p["kv/kernel"] + p["kv/bias"]  # (B, N, 2D): keys, then values
    k = kv[..., :d].reshape(b, -1, num_heads, dh)
    v = kv[..., d:].reshape(b, -1, num_heads, dh)
    weights = np_softmax(
        np.einsum("bqhk,bshk->bhqs", np.broadcast_to(q, (b, 1, num_heads, dh)), k) / math.sqrt(dh)
    )
    out = np.einsum("bhqs,bshk->bqhk", weights, v).reshape(b, 1, d)
    out = out @ p["proj/kernel"] + p["proj/bias"]
    y = np_layer_norm(out, p["norm/scale"], p["norm/bias"], eps)
    y = np_activation(y @ p["fc1/kernel"] + p["fc1/bias"], activation, approximate_gelu)
    return (out + y @ p["fc2/kernel"] + p["fc2/bias"])[:, 0]


def map_head_params(layer):
    n = to_numpy
    return {
        "latent": n(layer.latent)[0],
        "q/kernel": n(layer.q.kernel),
        "q/bias": n(layer.q.bias),
        "kv/kernel": n(layer.kv.kernel),
        "kv/bias": n(layer.kv.bias),
        "proj/kernel": n(layer.proj.kernel),
        "proj/bias": n(layer.proj.bias),
        "norm/scale": n(layer.norm.gamma),
        "norm/bias": n(layer.norm.beta),
        "fc1/kernel": n(layer.mlp_fc1.kernel),
        "fc1/bias": n(layer.mlp_fc1.bias),
        "fc2/kernel": n(layer.mlp_fc2.kernel),
        "fc2/bias": n(layer.mlp_fc2.bias),
    }


def np_vit_forward(
    model,
    images,
    *,
    pooling="token",
    include_top=True,
    class_token=None,
    num_register_tokens=0,
    distillation_token=False,
    prefix_position_embedding=True,
    pre_norm=False,
    fc_norm=False,
    activation="gelu",
    approximate_gelu=True,
    layer_norm_epsilon=1e-6,
    representation_size=None,
    stored_grid=None,
    return_blocks=False,
    return_attention=False,
    **_,
):
    """timm's `VisionTransformer(.Distilled).forward` in NumPy, from a keras_vit model's weights.

    Takes the builder's keyword arguments (what the model was built with) and reads the weights
    by layer name; `stored_grid` is the position-embedding grid when the images have another
    (dynamic image size: the table is resampled with `keras_vit.layers.bicubic.resize_bicubic`,
    which the tests check against PyTorch). Token order: [cls, dist, registers..., patches].
    Returns float64 outputs (logits, pooled vector or tokens), or with `return_blocks` the
    list of every block's output tokens (timm's `forward_intermediates(norm=False)`, NLC), or
    with `return_attention` the attention weights `(B, layers, heads, T, T)`.
    """
    from keras_vit.layers.bicubic import resize_bicubic

    n = lambda v: to_numpy(v).astype("float64")  # noqa: E731
    eps = layer_norm_epsilon
    if class_token is None:
        class_token = pooling in ("token", None)
    images = np.asarray(images, "float64")
    enc = model.get_layer("patch_encoder")
    kernel = n(enc.kernel)
    ph, pw, _, d = kernel.shape
    b, height, width = images.shape[:3]
    grid = (height // ph, width // pw)
    x = np_patches(images, (ph, pw)) @ kernel.reshape(-1, d) + n(enc.bias)
    prefix = []
    if class_token:
        prefix.append(n(enc.class_embedding))
    if distillation_token:
        prefix.append(n(enc.distillation_embedding))
    if num_register_tokens:
        prefix.append(n(enc.register_embeddings))
    count = sum(p.shape[1] for p in prefix)
    if enc.position_embedding == "learned":
        table = n(enc.position_embeddings)
        rows = count if prefix_position_embedding else 0
        positions = table[:, rows:]
        stored = tuple(stored_grid or grid)
        if stored != grid:
            positions = resize_bicubic(positions.reshape(*stored, d), grid).reshape(1, -1, d)
        x = x + positions
        if prefix and rows:
            prefix = [np.concatenate(prefix, 1) + table[:, :rows]]
    if prefix:
        x = np.concatenate([np.broadcast_to(np.concatenate(prefix, 1), (b, count, d)), x], 1)
    if pre_norm:
        norm = model.get_layer("pre_norm")
        x = np_layer_norm(x, n(norm.gamma), n(norm.beta), eps)
    i, blocks, attention = 0, [], []
    names = [layer.name for layer in model.layers]
    shared = 0.0
    if "relative_position_bias" in names:
        shared = _np_bias_of(model.get_layer("relative_position_bias"), grid, count)
    while f"encoderblock_{i}" in names:
        block = model.get_layer(f"encoderblock_{i}")
        params = {k: np.asarray(v, "float64") for k, v in block_params(block).items()}
        params["attention_bias"] = shared
        if block.relative_position_grid is not None:
            own = _np_bias_of(block.relative_position_bias, grid, count)
            params["attention_bias"] = shared + own
        if block.num_parallel > 1:
            x = np_parallel_block(x, block, eps, approximate_gelu, activation, shared)
            blocks.append(x)
            i += 1
            continue
        x, weights = np_block(x, params, eps, approximate_gelu, activation)
        blocks.append(x)
        attention.append(weights)
        i += 1
    if return_blocks:
        return blocks
    if return_attention:
        return np.stack(attention, axis=1)
    if not fc_norm:
        norm = model.get_layer("encoder_norm")
        x = np_layer_norm(x, n(norm.gamma), n(norm.beta), eps)
    if include_top and distillation_token:
        head, head_dist = model.get_layer("head"), model.get_layer("head_dist")
        return (
            x[:, 0] @ n(head.kernel)
            + n(head.bias)
            + x[:, 1] @ n(head_dist.kernel)
            + n(head_dist.bias)
        ) / 2
    if pooling is None:
        return x
    if pooling == "map":
        layer = model.get_layer("pooling")
        params = {k: v.astype("float64") for k, v in map_head_params(layer).items()}
        x = np_map_head(x[:, count:], params, layer.num_heads, eps, activation, approximate_gelu)
    elif pooling == "gap":
        x = x[:, count:].mean(1)
    else:
        x = (x[:, 0] + x[:, 1]) / 2 if distillation_token else x[:, 0]
    if fc_norm:
        norm = model.get_layer("fc_norm")
        x = np_layer_norm(x, n(norm.gamma), n(norm.beta), eps)
    if not include_top:
        return x
    if representation_size:
        pre = model.get_layer("pre_logits")
        x = np.tanh(x @ n(pre.kernel) + n(pre.bias))
    head = model.get_layer("head")
    return x @ n(head.kernel) + n(head.bias)


_TORCH_INTERPOLATE = """
import sys
import torch  # first: before anything could import TensorFlow in this process
import numpy as np
import torch.nn.functional as F

cases = np.load(sys.argv[1])
out = {}
for key in cases.files:
    grid, size = cases[key], tuple(int(s) for s in key.split("_to_")[1].split("x"))
    antialias = key.split("_")[1] == "antialias"
    x = torch.tensor(grid, dtype=torch.float32).permute(2, 0, 1)[None]
    y = F.interpolate(x, size=size, mode="bicubic", antialias=antialias, align_corners=False)
    out[key] = y[0].permute(1, 2, 0).numpy()
np.savez(sys.argv[2], **out)
"""


def torch_bicubic(grids, tmp_dir):
    """PyTorch's `F.interpolate(bicubic, antialias=..., align_corners=False)` of NumPy grids.

    Args:
        grids: a list of `(grid, (out_h, out_w))` pairs, `grid` a (h, w, C) array (antialiased,
            timm's resampling), or of `(grid, (out_h, out_w), antialias)` triples (False: the
            plain bicubic of Hugging Face's ViT).
        tmp_dir: a folder for the exchange files.

    Runs in a subprocess that imports torch before anything else (torch after TensorFlow can
    crash a process); returns the resized `(out_h, out_w, C)` arrays in the same order.
    """
    import os
    import subprocess
    import sys

    cases = {}
    for i, (g, (h, w), *antialias) in enumerate(grids):
        mode = "antialias" if (antialias or [True])[0] else "plain"
        cases[f"{i}_{mode}_to_{h}x{w}"] = np.asarray(g, "float32")
    source, target = os.path.join(tmp_dir, "grids.npz"), os.path.join(tmp_dir, "torch.npz")
    np.savez(source, **cases)
    proc = subprocess.run(
        [sys.executable, "-c", _TORCH_INTERPOLATE, source, target],
        capture_output=True,
        text=True,
        env=dict(os.environ, KERAS_BACKEND="torch"),
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    with np.load(target) as data:
        return [data[key] for key in cases]


def run_timm_script(script, source, target):
    """Runs `script` (Python source reading `sys.argv[1]` and writing the `.npz` `sys.argv[2]`) in
    a PyTorch-backend subprocess, where timm imports cleanly beside the CPU torch (through
    tests/weights/references.py), and returns the arrays it wrote; skips if timm is missing."""
    import subprocess
    import sys

    import pytest

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    proc = subprocess.run(
        [sys.executable, "-c", script, source, target],
        capture_output=True,
        text=True,
        cwd=root,
        env=dict(os.environ, KERAS_BACKEND="torch"),
    )
    if "timm (the `test` extra) is not installed" in proc.stdout + proc.stderr:
        pytest.skip("timm is not installed")
    assert proc.returncode == 0, proc.stderr[-3000:]
    with np.load(target) as data:
        return {key: data[key] for key in data.files}
