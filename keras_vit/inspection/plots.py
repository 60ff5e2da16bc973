"""The inspection pictures (matplotlib, imported lazily; an Agg canvas, no pyplot state): drawing
only, from the arrays the metrics modules compute."""

import os

import numpy as np

from keras_vit.inspection.attention import resize_bilinear


def _figure(figsize, dpi):
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as error:  # pragma: no cover - matplotlib is a declared dependency
        raise ImportError(
            "Plotting needs matplotlib: pip install matplotlib"
        ) from error
    fig = Figure(figsize=figsize, dpi=dpi)
    FigureCanvasAgg(fig)
    return fig


def _save(fig, path):
    path = os.fspath(path)
    directory = os.path.dirname(path)
    if directory:
        os.makedirs(directory, exist_ok=True)
    fig.savefig(path, dpi=fig.dpi, format="png")
    return path


def _display_image(image):
    """An image as float [0, 1] `(H, W, 3)` or `(H, W)` for imshow.

    Accepts uint8, [0, 255] or [-1, 1] inputs.
    """
    image = np.asarray(image, dtype="float64")
    if image.ndim == 3 and image.shape[-1] == 1:
        image = image[..., 0]
    if image.min() < 0.0:  # preprocessed to [-1, 1]
        image = (image + 1.0) / 2.0
    elif image.max() > 1.0:  # 0..255
        image = image / 255.0
    return np.clip(image, 0.0, 1.0)


def _normalise(x):
    x = np.asarray(x, dtype="float64")
    low, high = x.min(), x.max()
    return np.zeros_like(x) if high - low <= 0 else (x - low) / (high - low)


def plot_attention_overlay(images, maps, path, titles=None, panel_size=2.5, dpi=100):
    """Draws each image, its attention map and the map overlaid on the image; saves a PNG.

    One row per image with three panels: the input, the map (rescaled to [0, 1]
    per image), and the input shaded by the map. Maps are bilinearly resized to
    each image's own size, so an image may be shown at a higher resolution than
    the model's input.

    Args:
        images: sequence of `(H, W, C)` or `(H, W)` images, uint8 / [0, 255] /
            [0, 1] / [-1, 1] values (sizes may differ between images).
        maps: sequence of `(h, w)` maps (e.g. `attention_rollout(...).grid`).
        path: str. Output PNG path (folders are created).
        titles: optional sequence of row titles.
        panel_size: float. Inches per panel. Defaults to 2.5.
        dpi: int. Defaults to 100.

    Returns:
        str, the path. The PNG is `3 * panel_size * dpi` pixels wide and
        `len(images) * panel_size * dpi` high.
    """
    if len(images) != len(maps) or not len(images):
        raise ValueError(
            "images and maps must be non-empty and of the same length. "
            f"Received: {len(images)} images, {len(maps)} maps"
        )
    rows = len(images)
    fig = _figure((3 * panel_size, rows * panel_size), dpi)
    width, height = 3 * panel_size, rows * panel_size
    left = (0.3 if titles is not None else 0.05) / width
    fig.subplots_adjust(
        left=left, right=0.99, bottom=0.05 / height, top=1 - 0.3 / height, wspace=0.05, hspace=0.12
    )
    for r, (image, attention) in enumerate(zip(images, maps, strict=True)):
        image = _display_image(image)
        heat = _normalise(resize_bilinear(np.asarray(attention)[None], image.shape[:2])[0])
        grey = image if image.ndim == 2 else image.mean(-1)
        cmap = "gray" if image.ndim == 2 else None
        axes = [fig.add_subplot(rows, 3, 3 * r + c + 1) for c in range(3)]
        axes[0].imshow(image, cmap=cmap, vmin=0, vmax=1)
        axes[1].imshow(heat, cmap="inferno", vmin=0, vmax=1)
        axes[2].imshow(grey, cmap="gray", vmin=0, vmax=1)
        axes[2].imshow(heat, cmap="inferno", vmin=0, vmax=1, alpha=0.55)
        for ax in axes:
            ax.set_xticks([])
            ax.set_yticks([])
        if r == 0:
            for ax, label in zip(axes, ("input", "attention rollout", "overlay"), strict=True):
                ax.set_title(label, fontsize=10)
        if titles is not None:
            axes[0].set_ylabel(titles[r], fontsize=9)
    return _save(fig, path)


def plot_attention_distance(distances, path, figsize=(5.0, 4.0), dpi=100):
    """Scatter of mean attention distance against depth, one point per head (Fig. 7 right).

    Args:
        distances: `(layers, heads)` from `mean_attention_distance`.
        path: str. Output PNG path.
        figsize: (width, height) in inches. Defaults to (5, 4).
        dpi: int. Defaults to 100.

    Returns:
        str, the path (a `figsize * dpi` pixel PNG).
    """
    distances = np.asarray(distances)
    if distances.ndim != 2:
        raise ValueError(
            f"distances must have shape (layers, heads). Received: shape={distances.shape}"
        )
    layers, heads = distances.shape
    fig = _figure(figsize, dpi)
    ax = fig.add_subplot(1, 1, 1)
    depth = np.repeat(np.arange(1, layers + 1), heads)
    colour = np.tile(np.arange(heads), layers)
    points = ax.scatter(depth, distances.reshape(-1), c=colour, cmap="viridis", s=18)
    if heads > 1:
        fig.colorbar(points, ax=ax, label="head")
    ax.set_xlabel("Network depth (layer)")
    ax.set_ylabel("Mean attention distance (pixels)")
    ax.set_xticks(np.arange(1, layers + 1))
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return _save(fig, path)


def plot_position_embedding_similarity(similarity, path, figsize=(5.0, 4.4), dpi=100):
    """Tile grid of position-embedding similarities (Fig. 7 centre).

    Tile (i, j) shows the cosine similarity of patch (i, j)'s position embedding
    with every other patch's, laid out on the patch grid.

    Args:
        similarity: `(gh, gw, gh, gw)` from `position_embedding_similarity`.
        path: str. Output PNG path.
        figsize: (width, height) in inches. Defaults to (5, 4.4).
        dpi: int. Defaults to 100.

    Returns:
        str, the path (a `figsize * dpi` pixel PNG).
    """
    similarity = np.asarray(similarity, dtype="float64")
    if similarity.ndim != 4 or similarity.shape[:2] != similarity.shape[2:]:
        raise ValueError(
            f"similarity must have shape (gh, gw, gh, gw). Received: shape={similarity.shape}"
        )
    gh, gw = similarity.shape[:2]
    mosaic = np.full((gh * (gh + 1) - 1, gw * (gw + 1) - 1), np.nan)
    for i in range(gh):
        for j in range(gw):
            top, left = i * (gh + 1), j * (gw + 1)
            mosaic[top : top + gh, left : left + gw] = similarity[i, j]
    fig = _figure(figsize, dpi)
    ax = fig.add_subplot(1, 1, 1)
    image = ax.imshow(mosaic, cmap="viridis", vmin=-1, vmax=1, interpolation="nearest")
    ax.set_xticks([j * (gw + 1) + (gw - 1) / 2 for j in range(gw)], [str(j + 1) for j in range(gw)])
    ax.set_yticks([i * (gh + 1) + (gh - 1) / 2 for i in range(gh)], [str(i + 1) for i in range(gh)])
    ax.tick_params(length=0, labelsize=7)
    ax.set_xlabel("Input patch column")
    ax.set_ylabel("Input patch row")
    fig.colorbar(image, ax=ax, label="Cosine similarity", shrink=0.8)
    ax.set_title("Position embedding similarity", fontsize=10)
    return _save(fig, path)


def plot_embedding_filters(filters, path, columns=7, panel_size=0.8, dpi=100):
    """Grid of patch-embedding principal components (Fig. 7 left).

    Each component is min-max scaled to [0, 1] and drawn as an RGB patch (3
    channels) or a grey one (1 channel); components with another channel count
    (hybrid models: 1 x 1 patches on a feature map) are drawn as grey images of
    their `(ph, pw * C)` weights.

    Args:
        filters: `(n, ph, pw, C)` from `embedding_filters`.
        path: str. Output PNG path.
        columns: int. Panels per row. Defaults to 7.
        panel_size: float. Inches per panel. Defaults to 0.8.
        dpi: int. Defaults to 100.

    Returns:
        str, the path. The PNG is `columns * panel_size * dpi` pixels wide and
        `ceil(n / columns) * panel_size * dpi + 0.3 * dpi` high (title strip).
    """
    filters = np.asarray(filters, dtype="float64")
    if filters.ndim != 4:
        raise ValueError(f"filters must have shape (n, ph, pw, C). Received: shape={filters.shape}")
    n, ph, pw, channels = filters.shape
    columns = min(columns, n)
    rows = -(-n // columns)
    title = 0.3
    fig = _figure((columns * panel_size, rows * panel_size + title), dpi)
    top = rows * panel_size / (rows * panel_size + title)
    fig.subplots_adjust(left=0.01, right=0.99, bottom=0.01, top=top, wspace=0.08, hspace=0.08)
    for k in range(n):
        patch = _normalise(filters[k])
        if channels == 3:
            shown, cmap = patch, None
        elif channels == 1:
            shown, cmap = patch[..., 0], "gray"
        else:
            shown, cmap = patch.reshape(ph, pw * channels), "gray"
        ax = fig.add_subplot(rows, columns, k + 1)
        ax.imshow(shown, cmap=cmap, vmin=0, vmax=1, interpolation="nearest")
        ax.set_xticks([])
        ax.set_yticks([])
    fig.suptitle("Principal components of the patch embedding", fontsize=9, y=0.995, va="top")
    return _save(fig, path)
