"""The suite's one rule for the neural-search plugin (tests/conftest.py): a test that reaches the plugin without
@pytest.mark.neural_search fails on any node, the plugin installed or not, so a missing marker is found on the
machines that have the plugin instead of failing on a user's clone that does not; code that asked the node first (fusion "auto") adapts, and
its tests need no marker."""

from __future__ import annotations

from conftest import REPO

pytest_plugins = ["pytester"]

INNER = '''
import sys

from evalctl.evaluators.fusion.search_pipelines import ASKED_EVENT, REQUIRED_EVENT


def test_reaches_the_plugin_unmarked():
    sys.audit(REQUIRED_EVENT, "--method hybrid")


def test_adapts_to_the_node():
    sys.audit(ASKED_EVENT, "")
    sys.audit(REQUIRED_EVENT, "--method rrf")


def test_needs_no_plugin():
    sys.audit("evalctl.some.other.event", "x")
'''


def test_an_unmarked_test_reaching_the_plugin_fails(pytester):
    pytester.makeconftest((REPO / "tests" / "conftest.py").read_text())
    pytester.makepyfile(real_data=(REPO / "tests" / "real_data.py").read_text())
    pytester.makepyfile(test_inner=INNER)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=3, errors=1)  # the unmarked one errors at its teardown
    result.stdout.fnmatch_lines(["*reaches the neural-search plugin (--method hybrid) but is not marked "
                                 "@pytest.mark.neural_search*"])
