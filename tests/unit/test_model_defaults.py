"""Loaded models are frozen and share their model-typed and empty defaults instead of a copy each
(StrictModel.__deepcopy__, EMPTY_LIST, EMPTY_DICT), and one set of the names of the fields given
per combination (StrictModel.model_post_init)."""

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


def test_an_empty_list_or_dict_default_is_shared_refuses_changes_and_copies_into_a_plain_one() -> None:
    a, _ = load_federation(federation("a"))
    b, _ = load_federation(federation("b"))
    assert a is not None and b is not None
    pa, pb = a.spec.supernodes.pools[0], b.spec.supernodes.pools[0]
    assert pa.env == [] and pa.env is pb.env, "one empty list for every pool, not a copy each"
    assert pa.nodeConfig == {} and pa.nodeConfig is pb.nodeConfig
    with pytest.raises(TypeError):
        pa.env.append({"name": "X", "value": "1"})
    with pytest.raises(TypeError):
        pa.nodeConfig["k"] = "v"
    assert pb.env == [] and pb.nodeConfig == {}
    # what a caller copies or dumps is a plain list or dict, its own to fill
    for made_list in (copy.copy(pa.env), copy.deepcopy(pa.env), pa.env.copy(), pa.model_dump()["env"]):
        assert type(made_list) is list and made_list == []
    for made_dict in (copy.copy(pa.nodeConfig), copy.deepcopy(pa.nodeConfig), pa.nodeConfig.copy(),
                      pa.model_dump()["nodeConfig"]):
        assert type(made_dict) is dict and made_dict == {}
    given, _ = load_federation(federation("c", "      - name: x\n        replicas: 1\n        extraArgs: [--a]\n"))
    assert given is not None and type(given.spec.supernodes.pools[0].extraArgs) is list


def test_models_given_the_same_fields_share_one_set_of_their_names_and_a_copy_gets_its_own() -> None:
    pools = "      - name: x\n        replicas: 1\n      - name: y\n        replicas: 2\n        extraArgs: [--a]\n"
    a, _ = load_federation(federation("a", pools))
    b, _ = load_federation(federation("b", pools))
    assert a is not None and b is not None
    ax, ay = a.spec.supernodes.pools
    bx, by = b.spec.supernodes.pools
    assert ax.model_fields_set == {"name", "replicas"} and ay.model_fields_set == {"name", "replicas", "extraArgs"}
    assert ax.model_fields_set is bx.model_fields_set, "one set for every pool given the same fields"
    assert ay.model_fields_set is by.model_fields_set and ax.model_fields_set is not ay.model_fields_set
    changed = ax.model_copy(update={"nodeConfig": {"k": "v"}})
    assert changed.model_fields_set == {"name", "replicas", "nodeConfig"}
    assert ax.model_fields_set == {"name", "replicas"} and bx.model_fields_set == {"name", "replicas"}


def test_the_shared_sets_of_field_names_are_bounded_and_models_keep_theirs_when_they_are_dropped(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from syncer.models import base

    monkeypatch.setattr(base, "MAX_GIVEN", 2)
    monkeypatch.setattr(base, "_GIVEN", {})
    extras = ("extraArgs: [--a]", "nodeConfig: {k: v}", "env: []", "volumes: []")
    loaded = []
    for i, extra in enumerate(extras):  # a combination of pool fields each
        fed, _ = load_federation(federation(f"f{i}", f"      - name: x\n        replicas: 1\n        {extra}\n"))
        assert fed is not None
        loaded.append(fed)
        assert len(base._GIVEN) <= base.MAX_GIVEN + 1
    for fed, extra in zip(loaded, extras, strict=True):
        assert fed.spec.supernodes.pools[0].model_fields_set == {"name", "replicas", extra.split(":")[0]}
