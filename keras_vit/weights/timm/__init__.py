"""timm checkpoints in and out: `from_timm` (`reader`), `export_timm` (`export`), their tables.

The modules, bottom up: `records` and `sizes` (what a family's timm name table is made of),
`pretrained` (timm's pretrained configs, `pretrained.json`), `names` (`parse_timm_name` over the
registered families' tables), `hub` (a name -> its Hub checkpoint), `input_spec` (the input
spec and class names a timm checkpoint supplies), the layout of timm's `VisionTransformer`
(`table`, with its `options`, `stems`, `parallel` and `naflex` rows), `reader`, `naflex_config`,
`export_checks` and `export`. A family's own layout (`TimmLayout`) and names live in its folder
(`keras_vit/families/<name>/`); this package reads them through `keras_vit.weights.registry`.
Nothing is imported here, so a family's name table that imports `records` or `sizes` does not
load the reader.
"""
