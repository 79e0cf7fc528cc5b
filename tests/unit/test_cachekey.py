"""The render and plan caches are keyed by content (syncer.render.cachekey, issue 43): every input a
unit's render, its UnitPlan and its Flower-level target depend on is in the key. Each case changes
one input between two revisions and checks that the agent's warm caches (RevisionLoader, plan_repo's
`previous`, the FlowerMemo) answer as a load, render and plan made from scratch; a case whose input
is left out of the key serves the previous revision's answer and fails."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from syncer.agent.revision import LoadedRevision, RevisionLoader
from syncer.identity import Unit
from syncer.models import flower
from syncer.models.policy import RepositoryPolicy
from syncer.models.secret import SecretManifest
from syncer.models.settings import SyncPolicy
from syncer.plan import Plan
from syncer.render.cachekey import context_key, same_unit, unit_key
from syncer.render.podrules import AgentAccount
from syncer.render.repo import RenderCache, plan_repo, render_repo
from syncer.render.tenancy import Tenancy
from syncer.repo.loader import LoadCache, load_repo
from syncer.repo.state import LoadedUnit
from tests.builders import NS, federation, pool

SETTINGS = f"name: team\ndefaultNamespace: {NS}\nguardrails:\n  allowedServiceAccounts: [team-bot]\n"
BOT = pool("p", 2) + "        podTemplate: {spec: {serviceAccountName: team-bot}}\n"
SECRET = """\
apiVersion: v1
kind: Secret
metadata:
  name: r-token
type: Opaque
stringData:
  token: {token}
"""


def release(replicas: int = 1) -> str:
    return f"tls:\n  enabled: false\nsupernode:\n  replicas: {replicas}\n  superlink:\n    address: a-superlink\n"


FILES = {
    "flower-syncer.yaml": SETTINGS,
    # an image that names no Flower version: rendered for the newest release flower-syncer knows
    "federations/a.yaml": federation("a", BOT, insecure=True, version="latest"),
    "federations/b.yaml": federation("b", pool("p", 1), insecure=True),
    "supernodes/r/values.yaml": release(),
    "supernodes/r/secrets.yaml": SECRET.format(token="one"),
}


@dataclass
class World:
    """What a revision is loaded, rendered and planned from: the checkout and the agent's own."""

    root: Path
    agent: AgentAccount = dataclasses.field(default_factory=AgentAccount)
    tenancy: Tenancy | None = None

    def write(self, rel: str, text: str) -> None:
        (self.root / rel).parent.mkdir(parents=True, exist_ok=True)
        (self.root / rel).write_text(text)

    def loader(self) -> RevisionLoader:
        loader = RevisionLoader(tenancy=self.tenancy)
        loader._agent = self.agent
        return loader


def newest(monkeypatch: pytest.MonkeyPatch, version: flower.Version) -> None:
    """A new release of Flower known (the interface of each image is cached by the models)."""
    monkeypatch.setattr(flower, "NEWEST", version)
    flower.interface_of_image.cache_clear()
    flower.interface_of_tag.cache_clear()


Change = Callable[[World, pytest.MonkeyPatch], None]
CHANGES: dict[str, Change] = {
    "a federation's document": lambda w, _: w.write("federations/b.yaml", federation("b", pool("p", 3), insecure=True)),
    "a federation's annotation": lambda w, _: w.write("federations/a.yaml", federation(
        "a", BOT, "flower-syncer.io/flower-version: '1.30.0'", insecure=True, version="latest")),
    "a release's values": lambda w, _: w.write("supernodes/r/values.yaml", release(4)),
    "a release's declared Secret": lambda w, _: w.write("supernodes/r/secrets.yaml", SECRET.format(token="two")),
    "the repository's settings": lambda w, _: w.write("flower-syncer.yaml", SETTINGS + "policy:\n  prune: false\n"),
    "the repository's guardrails": lambda w, _: w.write("flower-syncer.yaml", SETTINGS.replace("team-bot", "other")),
    "the admin's policy": lambda w, _: setattr(w, "tenancy", Tenancy(policy=RepositoryPolicy())),
    "the agent's account": lambda w, _: setattr(w, "agent", AgentAccount("team-bot")),
    "Flower's newest release": lambda _, mp: newest(mp, (1, 30)),
}


@pytest.fixture
def fresh_interfaces() -> Iterator[None]:
    """The interfaces the models cached for Flower's facts of a case are forgotten after it."""
    yield
    flower.interface_of_image.cache_clear()
    flower.interface_of_tag.cache_clear()


def plan(revision: LoadedRevision, loader: RevisionLoader, name: str, previous: Plan | None = None) -> Plan:
    return plan_repo(revision.state, revision.rendered, revision=name, previous=previous.units if previous else None,
                     tenancy=loader.tenancy, flower_memo=loader.flower_memo)


def outcome(revision: LoadedRevision, planned: Plan) -> dict[str, Any]:
    """What the agent takes from a revision: every unit's manifests, errors and plan (not the
    revision each unit was planned at: a unit that did not change keeps its own)."""
    rendered = revision.rendered
    return {
        "manifests": {u: list(ms) for u, ms in rendered.units.items()},
        "diagnostics": [d.render() for d in revision.state.diagnostics + rendered.diagnostics],
        "failed": sorted(planned.failed),
        "plans": {u: (list(p.manifests), p.policy, p.source, p.node_auth, p.refs) for u, p in planned.units.items()},
        "flower": planned.flower,
        "claims": dict(planned.claims.objects),
    }


@pytest.mark.usefixtures("fresh_interfaces")
@pytest.mark.parametrize("change", list(CHANGES.values()), ids=list(CHANGES))
def test_each_input_changed_gives_a_new_render_through_the_warm_caches(change: Change, tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    world = World(tmp_path / "repo")
    for rel, text in FILES.items():
        world.write(rel, text)
    loader = world.loader()
    first = loader.load(world.root, "r1")
    assert first.errors == 0, first.error_lines()
    first_plan = plan(first, loader, "r1")
    before = outcome(first, first_plan)

    change(world, monkeypatch)
    loader._agent, loader.tenancy = world.agent, world.tenancy  # what the agent was started with
    warm = loader.load(world.root, "r2")
    warm_plan = plan(warm, loader, "r2", first_plan)
    scratch = world.loader()
    fresh = scratch.load(world.root, "r2")
    assert outcome(warm, warm_plan) == outcome(fresh, plan(fresh, scratch, "r2"))
    assert outcome(warm, warm_plan) != before  # the input matters: the case tests something


def test_a_unit_loaded_anew_with_the_same_content_is_not_rendered_or_planned_again(tmp_path: Path) -> None:
    """A second LoadCache (every file parsed again, every LoadedUnit a new object): the content
    keys are the same, so the render cache and the plan hand back what they made."""
    world = World(tmp_path / "repo")
    for rel, text in FILES.items():
        world.write(rel, text)
    renders = RenderCache()
    state = load_repo(world.root, cache=LoadCache())
    rendered = render_repo(state, cache=renders)
    first = plan_repo(state, rendered, revision="r1")
    again_state = load_repo(world.root, cache=LoadCache())
    assert all(a is not b for a, b in zip(state.units, again_state.units, strict=True))
    again = render_repo(again_state, cache=renders)
    assert renders.hits == len(state.units) == 3
    assert all(again.units[u] is ms for u, ms in rendered.units.items())
    second = plan_repo(again_state, again, revision="r2", previous=first.units)
    assert all(second.units[u] is p for u, p in first.units.items())
    assert again.claims == render_repo(load_repo(world.root)).claims


def units(root: Path) -> dict[str, LoadedUnit]:
    return {u.unit.name: u for u in load_repo(root).units}


# a changed value for every field that defines a LoadedUnit's equality
def _changed(loaded: LoadedUnit, other: LoadedUnit) -> dict[str, Any]:
    secret = SecretManifest.model_validate({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}})
    return {
        "unit": Unit("federation", NS, "renamed"),
        "source": "federations/elsewhere.yaml",
        "line": loaded.line + 1,
        "model": other.model,
        "policy": SyncPolicy(prune=not loaded.policy.prune),
        "secrets": (("federations/a.yaml", secret),),
        "sealed": frozenset({"a decrypted value"}),
        "seal_key": b"another key",
        "cluster": "east",
        "canary": (1, 60.0, 600.0),
    }


FIELDS = [f.name for f in dataclasses.fields(LoadedUnit) if f.compare]


@pytest.mark.parametrize("name", FIELDS)
def test_every_field_of_a_unit_loaded_without_a_cache_is_in_its_key(name: str, tmp_path: Path) -> None:
    """Without the loader's digest (a unit made without a LoadCache), the key is the unit's content."""
    world = World(tmp_path / "repo")
    for rel, text in FILES.items():
        world.write(rel, text)
    loaded, other = units(world.root)["a"], units(world.root)["b"]
    assert not loaded.inputs
    changed = _changed(loaded, other)
    assert sorted(changed) == sorted(FIELDS), "a new LoadedUnit field: give it a changed value here"
    again = units(world.root)["a"]
    assert again is not loaded and unit_key(again) == unit_key(loaded) and same_unit(again, loaded)
    variant = dataclasses.replace(loaded, **{name: changed[name]})
    assert unit_key(variant) != unit_key(loaded) and not same_unit(variant, loaded)


def test_the_loaders_digest_is_the_key_of_a_unit_it_cached(tmp_path: Path) -> None:
    world = World(tmp_path / "repo")
    for rel, text in FILES.items():
        world.write(rel, text)
    first = {u.unit.name: u for u in load_repo(world.root, cache=LoadCache()).units}
    second = {u.unit.name: u for u in load_repo(world.root, cache=LoadCache()).units}
    assert all(len(unit_key(u)) == 32 and unit_key(u) == u.inputs == second[n].inputs for n, u in first.items())
    assert len({u.inputs for u in first.values()}) == len(first)
    world.write("federations/b.yaml", federation("b", pool("p", 3), insecure=True))
    third = {u.unit.name: u for u in load_repo(world.root, cache=LoadCache()).units}
    assert [n for n in first if third[n].inputs != first[n].inputs] == ["b"]


def test_the_context_key_holds_the_settings_the_agent_and_flowers_facts(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    world = World(tmp_path / "repo")
    for rel, text in FILES.items():
        world.write(rel, text)
    settings = load_repo(world.root).settings
    key = context_key(settings, None)
    assert context_key(settings.model_copy(), None) == key
    assert context_key(settings.model_copy(update={"defaultNamespace": "other"}), None) != key
    assert context_key(settings, AgentAccount()) != key
    assert context_key(settings, AgentAccount("flower-syncer", "ops")) != context_key(settings, AgentAccount())
    monkeypatch.setattr(flower, "HTTP_FLEET_SINCE", (1, 41))
    assert context_key(settings, None) != key
