import pytest

from keras_vit.models.variants import SIZES, model_name, parse_variant

PAPER = {  # Table 1 of the paper (+ Ti, S from DeiT / AugReg)
    "Ti": (12, 192, 768, 3),
    "S": (12, 384, 1536, 6),
    "B": (12, 768, 3072, 12),
    "L": (24, 1024, 4096, 16),
    "H": (32, 1280, 5120, 16),
}


@pytest.mark.parametrize(
    "code", ["Ti/16", "S/16", "S/32", "B/8", "B/16", "B/32", "L/16", "L/32", "H/14"]
)
def test_official_codes_parse_to_paper_numbers(code):
    size, patch = code.split("/")
    config = parse_variant(code)
    got = (config["num_layers"], config["hidden_dim"], config["mlp_dim"], config["num_heads"])
    assert got == PAPER[size]
    assert config["patch_size"] == int(patch)
    assert "resnet_units" not in config


@pytest.mark.parametrize(
    "code,units,patch,size",
    [
        ("R50+B/16", (3, 4, 9), 1, "B"),
        ("R50+L/32", (3, 4, 6, 3), 1, "L"),
        ("R26+S/32", (2, 2, 2, 2), 1, "S"),
        ("R26+B/32", (2, 2, 2, 2), 1, "B"),
        ("R+Ti/16", (), 8, "Ti"),
        ("R26+mu/64", (2, 2, 2, 2), 2, "mu"),
    ],
)
def test_hybrid_codes(code, units, patch, size):
    config = parse_variant(code)
    assert config["resnet_units"] == units
    assert config["patch_size"] == patch
    assert config["hidden_dim"] == SIZES[size]["hidden_dim"]


@pytest.mark.parametrize(
    "code,match",
    [
        ("X/16", "Unknown model size 'X'"),
        ("B16", "Unknown variant code"),
        ("B/0", "Patch size must be positive"),
        ("R37+B/16", "Unknown ResNet stem 'R37'"),
        ("R50+B/20", "multiple of the R50 stem's stride"),
        (16, "variant must be a string"),
    ],
)
def test_bad_codes(code, match):
    with pytest.raises(ValueError, match=match):
        parse_variant(code)


def test_model_names():
    assert model_name("B/16") == "vit_b16"
    assert model_name("R50+B/16") == "vit_r50_b16"
