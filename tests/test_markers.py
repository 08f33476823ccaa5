"""The db_independent mark (tests/conftest.py): refused on a test that asks for the database or settings."""

from dataclasses import dataclass, field

import pytest

from tests.conftest import pytest_collection_modifyitems

pytestmark = pytest.mark.db_independent


@dataclass
class _Item:
    """The part of a collected test item the check reads."""

    nodeid: str
    marks: set[str]
    fixturenames: list[str] = field(default_factory=list)

    def get_closest_marker(self, name: str):
        return name if name in self.marks else None


@pytest.mark.parametrize(
    ("fixtures", "marks"),
    [
        (["db"], {"db_independent"}),
        (["transactional_db"], {"db_independent"}),
        (["live_server"], {"db_independent"}),
        (["settings"], {"db_independent"}),
        ([], {"db_independent", "django_db"}),
    ],
)
def test_the_mark_is_refused_on_a_test_that_asks_for_the_database_or_settings(fixtures, marks):
    item = _Item("tests/x.py::test_x", marks, ["redis_url", *fixtures])
    with pytest.raises(pytest.UsageError, match=r"tests/x.py::test_x is marked db_independent but uses"):
        pytest_collection_modifyitems(None, [item])


def test_the_mark_is_accepted_without_them_and_unmarked_tests_are_not_checked():
    items = [
        _Item("tests/x.py::test_pure", {"db_independent"}, ["redis_url", "tmp_path"]),
        _Item("tests/x.py::test_db", set(), ["db", "settings"]),
        _Item("tests/x.py::test_marked_db", {"django_db"}),
    ]
    # Fails with the UsageError if the check refused a pure test or looked at an unmarked one.
    assert pytest_collection_modifyitems(None, items) is None
