"""keras_vit/inspection/figures.py through the `keras-vit inspect` command."""

import numpy as np

from tests.inspection.references import png_size, tiny_vit


def test_inspect_command(tmp_path, capsys):
    from PIL import Image

    from keras_vit.cli import main
    from keras_vit.preprocessing import load_image

    model = tiny_vit()
    model_path = str(tmp_path / "model.keras")
    model.save(model_path)
    image_path = str(tmp_path / "photo.png")
    pixels = np.random.default_rng(0).integers(0, 256, (40, 60, 3), dtype="uint8")
    Image.fromarray(pixels).save(image_path)
    out = tmp_path / "plots"
    assert main(["inspect", model_path, "--image", image_path, "--out", str(out)]) == 0
    printed = capsys.readouterr().out.split()
    names = [
        "attention_overlay.png",
        "attention_distance.png",
        "position_embedding_similarity.png",
        "embedding_filters.png",
    ]
    assert printed == [str(out / name) for name in names]
    for name in names:
        assert (out / name).stat().st_size > 1000
    assert png_size(out / "attention_overlay.png") == (750, 250)
    assert png_size(out / "attention_distance.png") == (500, 400)
    # the image read by the command is resized to the model input and mapped to [-1, 1]
    images, display = load_image(image_path, (32, 32), 3)
    assert images.shape == (1, 32, 32, 3) and images.min() >= -1 and images.max() <= 1
    assert display.shape == (40, 60, 3)
    missing = str(tmp_path / "no.png")
    assert main(["inspect", model_path, "--image", missing, "--out", str(out)]) == 2
    assert missing in capsys.readouterr().err


def test_inspect_command_names_a_file_that_is_not_an_image(tmp_path, capsys):
    from keras_vit.cli import main

    model_path = str(tmp_path / "model.keras")
    tiny_vit().save(model_path)
    notes = tmp_path / "notes.png"
    notes.write_text("not an image")
    code = main(["inspect", model_path, "--image", str(notes), "--out", str(tmp_path / "o")])
    assert code == 2
    err = capsys.readouterr().err
    assert err.startswith("keras-vit inspect: error: ") and str(notes) in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "o").exists()
