"""scripts/test_changed.py, the contributor's fast loop: which tests a changed file maps to.

Backend-independent: the script's mapping reads file names and test sources (no Keras runs).
"""

import importlib.util
import os

import pytest

from tests.helpers import backend_independent

pytestmark = backend_independent  # file names and texts only

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def script():
    spec = importlib.util.spec_from_file_location(
        "test_changed_script", os.path.join(ROOT, "scripts", "test_changed.py")
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def tests(script):
    return script.test_files()


def test_a_test_file_maps_to_itself(script, tests):
    assert script.tests_for("tests/layers/test_patches.py", tests) == [
        "tests/layers/test_patches.py"
    ]


def test_a_module_maps_to_its_mirror_and_its_importers(script, tests):
    found = script.tests_for("keras_vit/layers/patches.py", tests)
    assert "tests/layers/test_patches.py" in found  # the mirror
    # every selected file names the module or imports it from its package
    for test in found:
        text = open(os.path.join(ROOT, test), encoding="utf-8").read()
        assert "keras_vit.layers.patches" in text or "Patches" in text, test
    assert len(found) == len(set(found))


def test_a_family_file_maps_to_its_family_tests(script, tests):
    found = script.tests_for("keras_vit/families/sam/timm.py", tests)
    assert found and all(t.startswith("tests/families/sam/") for t in found)


def test_a_package_init_maps_to_its_folder(script, tests):
    found = script.tests_for("keras_vit/distribution/__init__.py", tests)
    assert "tests/distribution/test_rules.py" in found


def test_a_docs_page_maps_to_its_example_groups(script):
    ids = script.docs_tests("docs/export.md")
    runs = [i for i in ids if "test_examples_run[" in i]
    assert runs and all(i.startswith("tests/test_docs.py::") for i in ids)
    assert "tests/test_docs.py::test_relative_links_exist[docs/export.md]" in ids


def test_anything_else_maps_to_the_architecture_tests(script, tests):
    assert script.tests_for("pyproject.toml", tests) == ["tests/test_architecture.py"]
    # a script: the test files that name it (test_docs.py checks the catalogue it writes)
    assert "tests/test_docs.py" in script.tests_for("scripts/make_catalogue.py", tests)
