"""keras_vit/inspection/plots.py: the PNG pictures."""

import numpy as np

from keras_vit import inspection as vi
from tests.inspection.references import png_size, random_images


def test_plots_write_pngs_of_the_expected_size(tmp_path):
    images = [random_images((32, 48, 3)), np.full((20, 20), 200, "uint8")]
    maps = [np.random.rand(4, 6), np.random.rand(2, 2)]
    path = vi.plot_attention_overlay(images, maps, tmp_path / "a" / "overlay.png", dpi=40)
    assert png_size(path) == (3 * 100, 2 * 100)
    path = vi.plot_attention_distance(np.random.rand(3, 4) * 10, tmp_path / "dist.png", dpi=50)
    assert png_size(path) == (250, 200)
    sim = np.random.rand(3, 5, 3, 5)
    path = vi.plot_position_embedding_similarity(sim, tmp_path / "sim.png", figsize=(4, 3), dpi=50)
    assert png_size(path) == (200, 150)
    filters = np.random.rand(10, 4, 4, 3)
    path = vi.plot_embedding_filters(
        filters, tmp_path / "filters.png", columns=4, panel_size=1.0, dpi=30
    )
    assert png_size(path) == (120, 3 * 30 + 9)
    for name in ("a/overlay.png", "dist.png", "sim.png", "filters.png"):
        assert (tmp_path / name).stat().st_size > 1000
