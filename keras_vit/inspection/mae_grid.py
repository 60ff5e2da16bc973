"""The picture people look at first for a masked autoencoder: for a few images, the masked input
(dropped patches grey), the reconstruction (the decoder's pixels on the dropped patches, the
visible ones pasted back, as the MAE paper's Figure 2) and the original."""

import numpy as np
from keras import ops

from keras_vit.inspection.plots import _display_image, _figure, _save
from keras_vit.models.mae import patch_pixels


def unpatchify(patches, image_size, patch_size, channels):
    """`(B, N, ph * pw * C)` in our `Patches` order -> `(B, H, W, C)` (NumPy)."""
    (h, w), (ph, pw) = image_size, patch_size
    x = np.asarray(patches).reshape(-1, h // ph, w // pw, ph, pw, channels)
    return x.transpose(0, 1, 3, 2, 4, 5).reshape(-1, h, w, channels)


def reconstruction_panels(model, images, noise=None):
    """`(masked, reconstruction, original)` `(B, H, W, C)` NumPy images of a
    `MaskedAutoencoder` on `images` (`norm_pix_loss`: the reconstruction de-normalised by each
    patch's own mean and standard deviation, as MAE's visualisation)."""
    images = np.asarray(images, "float32")
    config = model.encoder_config
    out = model(images, noise=noise, training=False)
    logits = ops.convert_to_numpy(out["logits"]).astype("float32")
    mask = ops.convert_to_numpy(out["mask"]).astype("float32")[..., None]
    targets = ops.convert_to_numpy(patch_pixels(images, config.patch_size))
    if model.norm_pix_loss:
        mean = targets.mean(-1, keepdims=True)
        std = np.sqrt(targets.var(-1, ddof=1, keepdims=True) + 1e-6)
        logits = logits * std + mean
    grey = np.full_like(targets, float(targets.mean()))
    size, channels = images.shape[1:3], images.shape[3]

    def image(patches):
        return unpatchify(patches, size, config.patch_size, channels)

    masked = image(targets * (1 - mask) + grey * mask)
    reconstruction = image(targets * (1 - mask) + logits * mask)
    return masked, reconstruction, images


def save_reconstruction_grid(model, images, path, noise=None, panel_size=1.5, dpi=100):
    """Writes the grid PNG (one row per image: masked, reconstruction, original); returns
    the path."""
    panels = reconstruction_panels(model, images, noise)
    low, high = float(np.min(panels[2])), float(np.max(panels[2]))  # the originals' range
    rows = len(panels[2])
    fig = _figure((3 * panel_size, rows * panel_size), dpi)
    titles = ("masked", "reconstruction", "original")
    for r in range(rows):
        for c in range(3):
            axis = fig.add_subplot(rows, 3, 3 * r + c + 1)
            shown = _display_image(np.clip((panels[c][r] - low) / max(high - low, 1e-12), 0, 1))
            axis.imshow(shown, cmap="gray" if shown.ndim == 2 else None, vmin=0, vmax=1)
            axis.set_xticks([])
            axis.set_yticks([])
            if r == 0:
                axis.set_title(titles[c], fontsize=8)
    fig.tight_layout()
    return _save(fig, path)
