"""keras_vit/families and keras_vit/weights/registry.py: every family folder registers itself, the
shared loaders find each family's parts through the registry, and the docs' table matches it."""

import os
import re

import pytest

import keras_vit.families as families
from keras_vit.weights import registry as R
from keras_vit.weights.timm import names as N
from tests.helpers import backend_independent

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FOLDER = os.path.join(ROOT, "keras_vit", "families")

pytestmark = backend_independent


def _folders():
    return sorted(
        name
        for name in os.listdir(FOLDER)
        if os.path.isfile(os.path.join(FOLDER, name, "__init__.py"))
    )


def test_every_folder_is_imported_and_registers_a_family_of_its_name():
    assert sorted(families.FAMILY_FOLDERS) == _folders()
    names = [record.name for record in R.registered()]
    assert names == list(families.FAMILY_FOLDERS)


def test_every_registered_reader_and_layout_resolves():
    for record in R.registered():
        for model_type, path in record.huggingface_readers.items():
            assert callable(R.load_callable(path)), (record.name, model_type, path)
            assert R.huggingface_reader(model_type) is R.load_callable(path)
            assert R.huggingface_types()[model_type] == record.name
        if record.timm_layout:
            layout = R.load_callable(record.timm_layout)
            assert isinstance(layout, R.TimmLayout) and callable(layout.claims), record.name
        if record.timm_reader:
            assert callable(R.load_callable(record.timm_reader)), record.name
            assert record.timm_patterns, f"{record.name}: a timm reader needs its name patterns"
        for class_name, path in record.huggingface_writers.items():
            assert callable(R.load_callable(path)), (record.name, class_name, path)
    assert R.huggingface_reader("not_a_model_type") is None


def test_from_timm_docstring_names_every_family():
    """Each family's timm names are listed in `from_timm`'s docstring under the family's name,
    by a name glob more specific than the plain ViT's (`vit_*_patch*_*` documents only `vit`)."""
    import fnmatch

    from keras_vit.weights.timm.reader import from_timm

    doc = from_timm.__doc__
    sections = dict(re.findall(r"\n    - (\w+): (.*?)(?=\n    - \w+:|\n    Other timm names)", doc,
                               re.S))  # fmt: skip
    assert list(sections) == [r.name for r in R.registered() if r.timm_specs or r.timm_reader]
    for record in R.registered():
        globs = re.findall(r"`([a-z0-9_*{},]+)`", sections.get(record.name, ""))
        specific = [g for g in globs if not fnmatch.fnmatchcase("vit_base_patch16_224", g)]
        for spec in record.timm_specs:
            arch = spec[2].split(".")[0]
            usable = globs if spec[0] == "vit" else specific
            assert any(fnmatch.fnmatchcase(arch, g) for g in usable), (record.name, spec[0], arch)


def test_each_family_example_parses_to_its_own_family():
    """The registry's order is the matching order: no family's names are taken by another's."""
    for record in R.registered():
        for spec in record.timm_specs:
            name, example = spec[0], spec[2]
            assert N.parse_timm_name(example).family.name == name, (record.name, example)
    for family in N.FAMILIES:
        assert N.parse_timm_name(family.example).family is family


def test_registered_tables_join_the_core_ones():
    eva = R.family("eva")
    assert set(eva.timm_default_classes) <= set(N.DEFAULT_CLASSES)
    for key, value in eva.timm_default_classes.items():
        assert N.DEFAULT_CLASSES[key] == value
    registered_names = {spec[0] for record in R.registered() for spec in record.timm_specs}
    assert registered_names <= {family.name for family in N.FAMILIES}
    assert len(N.FAMILIES) == len({family.name for family in N.FAMILIES})


def test_layouts_compose_in_registration_order():
    """A Qwen3-VL tower is an `Eva` table (eva family) wrapped by the vlm family; a BEiT model
    (no timm name: as export_timm asks) is claimed by its config alone."""
    spec = N.parse_timm_name("qwen3_vit_306m_enc.qwen3_vl_4b")
    layouts = R.timm_layouts_for(None, spec)
    expected = [R.load_callable(R.family(name).timm_layout) for name in ("eva", "vlm")]
    assert list(layouts) == expected
    from keras_vit.models.config import ViTConfig

    beit = ViTConfig.from_variant(
        "mu/8", image_size=32, relative_position_bias="block", class_token=True
    )
    assert R.timm_layouts_for(beit, None) == (
        R.load_callable(R.family("beit").timm_layout),
    )
    plain = ViTConfig.from_variant("mu/8", image_size=32)
    assert R.timm_layouts_for(plain, None) == ()


def test_register_refuses_what_would_be_ambiguous():
    with pytest.raises(TypeError, match="Expected a ModelFamily"):
        R.register({"name": "x"})
    eva = R.family("eva")
    with pytest.raises(ValueError, match="already registered"):
        R.register(R.ModelFamily(name="eva", description="another eva"))
    clash = R.ModelFamily(
        name="not_dinov2", description="x", huggingface_readers={"dinov2": "a.b:c"}
    )
    with pytest.raises(ValueError, match=r"model_type\(s\) \['dinov2'\].*dinov2"):
        R.register(clash)
    assert R.register(eva) is eva  # the same record again is a no-op
    assert "not_dinov2" not in [record.name for record in R.registered()]
    with pytest.raises(ValueError, match="Unknown model family 'nope'. Expected one of"):
        R.family("nope")


def test_docs_model_type_table_is_the_registry():
    """docs/weights.md's `from_huggingface` table lists exactly the registered model types."""
    with open(os.path.join(ROOT, "docs", "weights.md"), encoding="utf-8") as f:
        text = f.read()
    section = text.split("### `from_huggingface` families", 1)[1].split("\n### ", 1)[0]
    listed = {}
    for row in section.splitlines():
        cells = [cell.strip() for cell in row.strip("|").split("|")]
        if len(cells) == 3 and cells[0].startswith("`") and cells[0] != "`model_type`":
            family = cells[2].strip("`")
            for model_type in re.findall(r"`([^`]+)`", cells[0]):
                listed[model_type] = family
    expected = {"vit": "keras_vit.weights.huggingface"}
    expected.update(
        {t: f"keras_vit.families.{name}" for t, name in R.huggingface_types().items()}
    )
    assert listed == expected
