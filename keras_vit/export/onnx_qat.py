"""The integer ONNX graph of a quantization-aware model: its fake-quantized weights as int8.

tf2onnx writes TensorFlow's `FakeQuantWithMinMaxVars` (the fake-quantized inputs of a QAT
model's `Dense` / `EinsumDense` layers, `keras_vit/layers/fake_quant.py`) as QuantizeLinear /
DequantizeLinear pairs with the learned range, and folds each fake-quantized kernel into a
float initializer whose columns hold `k * scale` for integers `|k| <= 127`. `qat_weights_to_qdq`
stores every such MatMul weight as int8 with its per-column scale behind a DequantizeLinear
(axis 1, zero point 0): onnxruntime then runs the MatMuls on integers
(`MatMulIntegerToFloat` / `QLinearMatMul`), the product the fake-quant model computed. A weight
that is not on that grid is refused (it is not a fake-quantized kernel).
"""

import numpy as np

# Ops between a DequantizeLinear and the MatMul that reads it which only move values (the
# Reshape / Transpose of Keras' Tensordot and einsum lowering).
_LAYOUT_OPS = ("Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten", "Identity")
_GRID_TOLERANCE = 1e-5


def _producer_chain_has_dequantize(tensor, producers):
    node = producers.get(tensor)
    while node is not None and node.op_type in _LAYOUT_OPS:
        node = producers.get(node.input[0])
    return node is not None and node.op_type == "DequantizeLinear"


def _on_grid(values, name):
    """`(integers, per-column scale)` of a weight whose columns are `k * max|w| / L` for
    integers `|k| <= L`, `L = 2^(b-1) - 1` (a `weight_bits=b` kernel; the largest L that fits)."""
    peak = np.max(np.abs(values), axis=0)
    for bits in range(8, 1, -1):
        levels = 2 ** (bits - 1) - 1
        scale = np.where(peak > 0, peak / levels, 1.0)
        integers = np.rint(values / scale)
        error = np.max(np.abs(integers * scale - values)) if values.size else 0.0
        if error <= _GRID_TOLERANCE * max(1e-12, float(np.max(peak, initial=0.0))):
            return integers, scale
    raise ValueError(
        f"The MatMul weight {name!r} is not on a symmetric per-column integer grid of 2 to 8 "
        "bits: not a fake-quantized kernel of a quantization-aware model."
    )


def qat_weights_to_qdq(model):
    """Rewrites a QAT model's fake-quantized MatMul weights as int8 + DequantizeLinear, in place.

    Args:
        model: an `onnx.ModelProto` (tf2onnx's graph of a quantization-aware model).

    Returns:
        `model`.

    Raises:
        ValueError: no MatMul reads a quantized input (not a QAT graph), or a weight is not
            on a symmetric 8-bit per-column grid.
    """
    import onnx
    from onnx import helper, numpy_helper

    graph = model.graph
    initializers = {i.name: i for i in graph.initializer}
    producers = {out: node for node in graph.node for out in node.output}
    consumers = {}
    for node in graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    rewritten = {}
    new_nodes = []
    for node in graph.node:
        weight = node.input[1] if node.op_type == "MatMul" and len(node.input) == 2 else None
        if (
            weight is None
            or weight not in initializers
            or initializers[weight].data_type != onnx.TensorProto.FLOAT
            or len(initializers[weight].dims) != 2
            or not _producer_chain_has_dequantize(node.input[0], producers)
        ):
            new_nodes.append(node)
            continue
        if weight not in rewritten:
            values = numpy_helper.to_array(initializers[weight]).astype("float64")
            integers, scale = _on_grid(values, weight)
            base = weight.replace(":", "_")
            names = (f"{base}_int8", f"{base}_scale", f"{base}_zero", f"{base}_dequantized")
            graph.initializer.extend(
                [
                    numpy_helper.from_array(integers.astype("int8"), names[0]),
                    numpy_helper.from_array(scale.astype("float32"), names[1]),
                    numpy_helper.from_array(np.zeros(scale.shape, "int8"), names[2]),
                ]
            )
            new_nodes.append(
                helper.make_node(
                    "DequantizeLinear", list(names[:3]), [names[3]], name=names[3], axis=1
                )
            )
            rewritten[weight] = names[3]
        node.input[1] = rewritten[weight]
        new_nodes.append(node)
    if not rewritten:
        raise ValueError(
            "No MatMul of this ONNX graph reads a quantized input: it is not the graph of a "
            "quantization-aware model."
        )
    for weight in rewritten:
        if all(weight not in n.input for n in consumers[weight]):
            graph.initializer.remove(initializers[weight])
    del graph.node[:]
    graph.node.extend(new_nodes)
    return model
