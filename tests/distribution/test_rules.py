"""keras_vit/distribution/rules.py and mesh.py, and the distribution modes' argument checks:
pure logic (no devices, no backend), run once."""

import argparse

import pytest

from keras_vit.cli.types import mesh_shape
from keras_vit.distribution.mesh import check_mesh_shape, default_mesh_shape, parse_mesh
from keras_vit.distribution.rules import Rules, tensor_parallel_axis
from keras_vit.layers.sharding import (
    COLUMN,
    HEADS,
    KEY_VALUE,
    PROJECTION,
    REPLICATED,
    ROW,
    WIDTH,
)
from keras_vit.training.distribution import check_mode
from tests.helpers import backend_independent

pytestmark = backend_independent


def test_tensor_parallel_axis_of_each_role():
    assert tensor_parallel_axis(COLUMN, "kernel", (768, 12, 64)) == (1, "attention heads", True)
    assert tensor_parallel_axis(COLUMN, "kernel", (768, 3072)) == (1, "output features", True)
    assert tensor_parallel_axis(COLUMN, "kernel", (16, 16, 3, 768))[0] == 3
    assert tensor_parallel_axis(COLUMN, "bias", (12, 64)) == (0, "attention heads", True)
    assert tensor_parallel_axis(ROW, "kernel", (12, 64, 768)) == (0, "attention heads", True)
    assert tensor_parallel_axis(ROW, "kernel", (3072, 768)) == (0, "input features", True)
    assert tensor_parallel_axis(ROW, "bias", (768,))[0] is None  # added after the all-reduce
    assert tensor_parallel_axis(KEY_VALUE, "kernel", (768, 1, 64)) == (1, "attention heads", False)
    assert tensor_parallel_axis(HEADS, "relative_position_bias_table", (732, 12))[0] == 1
    assert tensor_parallel_axis(WIDTH, "position_embeddings", (1, 197, 768))[:2] == (
        2, "model width",
    )  # fmt: skip
    assert tensor_parallel_axis(REPLICATED, "gamma", (768,))[0] is None
    assert tensor_parallel_axis(COLUMN, "lora_kernel_a", (768, 8))[0] is None


def test_fsdp_takes_the_largest_dimension_the_data_axis_divides():
    rules = Rules("fsdp", (8, 1), min_shard_bytes=0)
    assert rules.spec("q", (768, 12, 64), "float32", COLUMN, "kernel") == ("batch", None, None)
    assert rules.spec("t", (732, 16), "float32", HEADS, "table") == (None, "batch")  # 732 % 8
    # Below min_shard_bytes FSDP leaves a variable whole (and that is no error).
    small = Rules("fsdp", (8, 1), min_shard_bytes=1 << 20)
    assert small.spec("g", (768,), "float32", REPLICATED, "gamma") == (None,)


def test_fsdp_tp_combines_both_axes():
    rules = Rules("fsdp_tp", (4, 2), min_shard_bytes=0)
    assert rules.spec("q", (32, 2, 16), "float32", COLUMN, "kernel") == ("batch", "model", None)
    assert rules.spec("o", (2, 16, 32), "float32", ROW, "kernel") == ("model", None, "batch")
    assert rules.spec("m2", (64, 32), "bfloat16", ROW, "kernel") == ("model", "batch")


def test_strict_roles_name_the_dimension_and_a_mesh_that_fits():
    rules = Rules("tensor_parallel", (1, 8))
    with pytest.raises(ValueError, match=r"attention heads \(axis 1: 2\).*8 devices.*"
                       r"strategy='fsdp_tp', mesh_shape=\(4, 2\)"):  # fmt: skip
        rules.spec("block/attention/query/kernel", (32, 2, 16), "float32", COLUMN, "kernel")
    with pytest.raises(ValueError, match=r"input features \(axis 0: 60\).*mesh_shape=\(2, 4\)"):
        rules.spec("mlp_dense_2/kernel", (60, 32), "float32", ROW, "kernel")


def test_grouped_query_and_unclaimed_projections_fall_back():
    rules = Rules("fsdp_tp", (4, 2), min_shard_bytes=0)
    # One key / value head on a model axis of 2: whole on the model axis, FSDP still shards it.
    assert rules.spec("k", (32, 1, 16), "float32", KEY_VALUE, "kernel") == ("batch", None, None)
    # A head of 5 classes: its outputs do not split, its inputs do.
    assert rules.spec("head", (32, 5), "float32", PROJECTION, "kernel") == ("model", None)


def test_no_silent_replica():
    rules = Rules("fsdp", (8, 1), min_shard_bytes=32)
    with pytest.raises(ValueError) as error:
        rules.spec("dense/kernel", (5, 3), "float32", PROJECTION, "kernel", "generic")
    text = str(error.value)
    for part in ("'dense/kernel'", "(5, 3)", "strategy='fsdp'", "whole replica", "60 bytes"):
        assert part in text, text
    # No strategy shards on a mesh of one device: nothing to refuse.
    assert Rules("fsdp", (1, 1), 0).spec("d", (5, 3), "float32", PROJECTION, "kernel") == (
        None, None,
    )  # fmt: skip


def test_meshes():
    assert parse_mesh("2x4") == (2, 4) and parse_mesh("8") == (8, 1)
    assert check_mesh_shape([2, 4]) == (2, 4)
    for bad in ("2x", "0x8", "axb", "2x2x2"):
        with pytest.raises(ValueError, match="BATCHxMODEL"):
            parse_mesh(bad)
    for bad in ((2,), (2, 0), (2.0, 4), (True, 8)):
        with pytest.raises(ValueError, match="mesh_shape"):
            check_mesh_shape(bad)
    assert [default_mesh_shape(s, 8) for s in ("fsdp", "tensor_parallel", "fsdp_tp")] == [
        (8, 1), (1, 8), (4, 2),
    ]  # fmt: skip
    assert default_mesh_shape("fsdp_tp", 8, num_processes=2) == (2, 4)
    assert mesh_shape("2x4") == (2, 4)
    with pytest.raises(argparse.ArgumentTypeError, match="BATCHxMODEL"):
        mesh_shape("two")


@pytest.mark.parametrize(
    "kwargs, match",
    [
        # The misuse battery's g09_dist: 0 meant "all devices", wrong types were raw errors.
        (dict(mode="model_parallel", model_parallel_size=0), "integer >= 1.*=0"),
        (dict(mode="model_parallel", model_parallel_size="2"), "integer >= 1.*='2'"),
        (dict(mode="model_parallel", model_parallel_size=True), "integer >= 1.*=True"),
        (dict(mode="model_parallel", model_parallel_size=2.0), "integer >= 1.*=2.0"),
        (dict(mode="model_parallel", model_parallel_size=-2), "integer >= 1.*=-2"),
        (dict(mode="data_parallel", model_parallel_size=2), "'model_parallel' only"),
        (dict(mode="data_parallel", mesh=(2, 4)), "mesh of the strategies"),
        (dict(mode="fsdp", mesh="2y4"), "BATCHxMODEL"),
        (dict(mode="zero3"), "distribution must be one of"),
    ],
)
def test_distribution_modes_refuse_what_they_would_ignore(kwargs, match):
    with pytest.raises(ValueError, match=match):
        check_mode(**kwargs)
