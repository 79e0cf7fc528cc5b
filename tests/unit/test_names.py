"""Names, keys and quantities are checked with whole-string matches: Python's `$` also matches
before a trailing newline, so `fed\\n` used to pass as a valid name (issue 9, item 7)."""

from __future__ import annotations

import pytest

from syncer.models.k8s import _QUANTITY
from syncer.models.names import name_problem
from syncer.models.nodeconfig import KEY


@pytest.mark.parametrize("kind", ["namespace", "federation name", "repository name"])
@pytest.mark.parametrize("bad", ["fed\n", "fed\r", "\nfed", "f\u0661"])
def test_names_with_a_newline_or_non_ascii_digit_are_refused(kind: str, bad: str) -> None:
    assert name_problem(bad, kind)
    assert not name_problem("fed-1", kind)


def test_node_config_keys_and_quantities_match_whole_strings() -> None:
    assert KEY.match("partition-id") and not KEY.match("0\n") and not KEY.match("partition-id\n")
    assert _QUANTITY.match("500m") and not _QUANTITY.match("500m\n") and not _QUANTITY.match("\u0661")
