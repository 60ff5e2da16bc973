"""keras_vit/families and keras_vit/weights/registry.py: every family folder is found and
registers itself, the shared loaders find each family's parts through the registry, the
registry refuses what would be ambiguous or malformed, and the docs' tables are its."""

import os
import re
import subprocess
import sys

import pytest

import keras_vit.families as families
from keras_vit import _plugins
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


def test_every_folder_is_found_and_registers_a_family_of_its_name():
    """No list names the folders: a new folder is found (`_plugins.subpackages`)."""
    assert families.FAMILY_FOLDERS == tuple(_folders())
    assert [record.name for record in R.registered()] == _folders()


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


def test_from_timm_docstring_lists_every_family_from_the_registry():
    """`from_timm`'s list of families is generated: each family with timm names, its
    description and an example of each of its name patterns."""
    from keras_vit.weights.timm.reader import families_doc, from_timm

    assert families_doc() in from_timm.__doc__
    listed = re.findall(r"\n    - (\w+): ", from_timm.__doc__)
    assert listed == [r.name for r in R.registered() if r.timm_specs or r.timm_reader]
    text = " ".join(from_timm.__doc__.split())
    for record in R.registered():
        for spec in record.timm_specs:
            assert f"`{spec[2].split('.')[0]}`" in text, (record.name, spec[0])


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


def test_layouts_compose_in_name_order():
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


def _row(pattern, example="vit_tiny_patch16_224"):
    return ("late", pattern, example, "a late family", lambda groups: {"variant": "Ti/16"})


@pytest.mark.parametrize(
    "field, pattern",
    [
        ("timm_specs", r"vit_tiny_patch16_\d+"),  # takes vit's vit_tiny_patch16_224 and _384
        ("timm_unsupported", r"vit_tiny_patch16_224"),  # would refuse a name vit reads
        ("timm_patterns", r"deit_tiny_patch16_224"),  # an own reader for DeiT's name
    ],
)
def test_a_late_family_cannot_take_a_timm_name_another_family_reads(field, pattern):
    fields = {
        "timm_specs": dict(timm_specs=(_row(pattern),)),
        "timm_unsupported": dict(timm_unsupported=((pattern, "nothing"),)),
        "timm_patterns": dict(timm_reader="late.module:reader", timm_patterns=(pattern,)),
    }[field]
    late = R.ModelFamily(name="late", description="x", **fields)
    with pytest.raises(ValueError, match=r"'late'.*match \['(vit|deit)_tiny_patch16_.*family "
                                         r"'vit' reads"):  # fmt: skip
        R.register(late)
    assert "late" not in [record.name for record in R.registered()]
    from keras_vit.weights.timm import names as N

    assert N.parse_timm_name("vit_tiny_patch16_224").family.name == "vit"


@pytest.mark.parametrize(
    "fields, error, match",
    [
        (dict(name=123), TypeError, r"name must be a str. Received: name=123"),
        (dict(name=""), ValueError, r"name must be a folder name.*Received: name=''"),
        (dict(name="My Family"), ValueError, r"Received: name='My Family'"),
        (dict(description=""), ValueError, r"description must be a str. Received: description=''"),
        (dict(description=None), TypeError, r"description must be a str"),
        (dict(timm_specs=("vit",)), TypeError, r"each of timm_specs must be a \(name, pattern"),
        (dict(timm_specs=(_row("vit_(",),)), ValueError, r"pattern must be a regular expression"),
        (dict(timm_default_classes={"x": -1}), ValueError, r"timm_default_classes\['x'\] must "
                                                           r"be an int >= 0"),  # fmt: skip
        (dict(timm_headless=("nope",)), ValueError, r"timm_headless must be one of \[\]"),
        (dict(timm_reader="keras_vit.families.eva"), ValueError,
         r"timm_reader must be a 'package.module:name' str"),  # fmt: skip
        (dict(timm_reader="a.b:c"), ValueError, r"timm_patterns must be the names timm_reader"),
        (dict(timm_patterns=("x_.*",)), ValueError, r"timm_reader must be given with"),
        (dict(timm_layout=["a.b:c"]), TypeError, r"timm_layout must be a 'package.module:name'"),
        (dict(huggingface_readers={"x": "no colon"}), ValueError,
         r"huggingface_readers\['x'\] must be a 'package.module:name' str"),  # fmt: skip
        (dict(huggingface_readers=["x"]), TypeError, r"huggingface_readers must be a dict"),
        (dict(huggingface_input_specs={"x": {}}), ValueError,
         r"huggingface_input_specs' keys must be model types of huggingface_readers"),  # fmt: skip
    ],
)
def test_a_family_record_checks_its_fields(fields, error, match):
    """Each field is checked when the record is made, in its own name (not at first use)."""
    with pytest.raises(error, match=match):
        R.ModelFamily(**{"name": "late", "description": "x", **fields})


def test_lookups_refuse_what_is_not_a_name():
    with pytest.raises(TypeError, match=r"name must be a family name \(a str\). Received: "
                                        r"name=\['vit'\]"):  # fmt: skip
        R.family(["vit"])
    with pytest.raises(TypeError, match="architecture must be a timm architecture name"):
        R.family_of_timm_name(None)
    with pytest.raises(ValueError, match=r"Expected 'package.module:name'. Received: "
                                         r"'keras_vit.families.eva'"):  # fmt: skip
        R.load_callable("keras_vit.families.eva")
    with pytest.raises(ValueError, match="Module 'keras_vit.families.eva' has no 'NOPE'"):
        R.load_callable("keras_vit.families.eva:NOPE")


def test_a_plugin_reading_its_point_while_loading_is_refused(tmp_path, monkeypatch):
    """What the `mark_complete` handshake did, inside `keras_vit._plugins`: a plug-in's
    `__init__` that reads the point its package is filling gets a RuntimeError, not a half
    registry; a later read loads the package again (nothing is left half-loaded)."""
    package = tmp_path / "kv_plugin_test_pkg"
    (package / "reader").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "reader" / "__init__.py").write_text(
        "from keras_vit import _plugins\n_plugins.load('kv test point')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    _plugins.provide("kv test point", "kv_plugin_test_pkg", subpackages=True)
    with pytest.raises(RuntimeError, match="kv test point was read while kv_plugin_test_pkg"):
        _plugins.load("kv test point")
    assert not _plugins.is_loading("kv test point")
    with pytest.raises(ValueError, match="is provided by 'kv_plugin_test_pkg'"):
        _plugins.provide("kv test point", "another_pkg")


_REGISTER_FIRST = """
import keras_vit
from keras_vit.weights import registry as R
try:
    R.register(R.ModelFamily(name="vit", description="mine"))  # before anything read it
except ValueError as error:
    print("refused:", error)
late = R.register(R.ModelFamily(name="zz_late", description="a user's family"))
names = [f.name for f in R.registered()]
assert names[-1] == "zz_late" and "vit" in names, names
from keras_vit.weights.timm.reader import reads_timm_name, timm_config
assert reads_timm_name("vit_tiny_patch16_224")  # from_timm's name table is whole
print("config", timm_config("vit_tiny_patch16_224").hidden_dim)
"""


def test_registering_before_the_first_read_comes_after_the_folders():
    """A family registered before anything read the registry is checked against the folders
    (a clear refusal of a taken name), and `from_timm`'s tables stay whole afterwards."""
    env = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="3", KERAS_BACKEND="jax")
    proc = subprocess.run([sys.executable, "-c", _REGISTER_FIRST], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "refused: A family named 'vit' is already registered." in proc.stdout
    assert "config 192" in proc.stdout


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
