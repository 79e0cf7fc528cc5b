"""Loaded models are frozen and share their model-typed defaults instead of a copy each
(StrictModel.__deepcopy__)."""

from __future__ import annotations

import copy

import pytest
from pydantic import ValidationError

from tests.builders import federation
from tests.unit.helpers import load_federation


def test_a_model_default_is_one_instance_for_every_model_and_stays_frozen() -> None:
    without_images = "      - name: {name}\n        replicas: 1\n"
    a, _ = load_federation(federation("a", without_images.format(name="x") + without_images.format(name="y")))
    b, _ = load_federation(federation("b"))
    assert a is not None and b is not None
    service = [a.spec.superlink.service, b.spec.superlink.service]
    assert service[0] is service[1], "the default SuperLinkService is shared, not copied into each Federation"
    x, y = a.spec.supernodes.pools
    assert x.images is y.images and x.images.supernode == ""
    assert copy.deepcopy(a) is a
    with pytest.raises(ValidationError):
        a.spec.superlink.service.type = "NodePort"
