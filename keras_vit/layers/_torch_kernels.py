"""PyTorch adapter (backend-specific, imported only under the torch backend).

`TransformerBlock` computes its linear layers and its attention through PyTorch's own fused
kernels when Keras runs on PyTorch. Same weights, same variables, same mathematics as the
`keras.ops` path (tested against it); only the kernels differ:

- `F.linear` adds the bias inside the matrix product (`addmm`), where a Keras `Dense` or
  `EinsumDense` is a matmul followed by a separate add (one more pass over the activations,
  forward and backward);
- the query, key and value projections run as one `(B*T, D) x (D, 3D)` product on the three
  kernels side by side (`MultiHeadAttention` runs three `einsum`s), and the heads go to
  `F.scaled_dot_product_attention` as strided views of that product.

What it bought, measured on 2 CPU cores (benchmarks/RESULTS.md): the same speed as the keras.ops
path within noise, and 16% less peak memory (RSS) in a ViT-S/16 training step at batch 16.

The keras.ops path stays the reference (and the path on JAX and TensorFlow); set
`KERAS_VIT_TORCH_KERNELS=0` to use it on PyTorch too.
"""

import torch.nn.functional as F


def linear(x, kernel, bias):
    """`x @ kernel + bias` in one `addmm`; `kernel` is Keras' `(in, out)` layout."""
    return F.linear(x, kernel.t(), bias)


def self_attention(x, qkv_kernel, qkv_bias, out_kernel, out_bias, num_heads, qk_norm=None):
    """Multi-head self-attention of `x` `(B, T, D)`.

    Args:
        qkv_kernel: `(D, 3 * D)`, the query, key and value kernels side by side, each
            `(D, heads * head_dim)` in head-major order (Keras' `(D, heads, head_dim)`).
        qkv_bias: `(3 * D,)`, the three biases in the same order.
        out_kernel: `(D, D)`, the output kernel `(heads * head_dim, D)`.
        out_bias: `(D,)`.
        qk_norm: optional `(query_gamma, query_beta, key_gamma, key_beta, epsilon)`: a
            LayerNorm over the head width on the queries and on the keys.
    """
    batch, tokens, _ = x.shape
    qkv = linear(x, qkv_kernel, qkv_bias)  # (B, T, 3 * D)
    qkv = qkv.view(batch, tokens, 3, num_heads, -1).permute(2, 0, 3, 1, 4)  # (3, B, H, T, hd)
    query, key, value = qkv[0], qkv[1], qkv[2]
    if qk_norm is not None:
        query_gamma, query_beta, key_gamma, key_beta, epsilon = qk_norm
        width = (query.shape[-1],)
        query = F.layer_norm(query, width, query_gamma, query_beta, epsilon)
        key = F.layer_norm(key, width, key_gamma, key_beta, epsilon)
    # The default scale is 1 / sqrt(head_dim), as Keras' MultiHeadAttention uses.
    out = F.scaled_dot_product_attention(query, key, value)  # (B, H, T, hd)
    out = out.transpose(1, 2).reshape(batch, tokens, -1)
    return linear(out, out_kernel, out_bias)

