"""The agent's choice of allocator (syncer.agent.allocator): what it starts itself again with."""

from __future__ import annotations

from syncer.agent.allocator import SETTINGS, agent_environment


def test_the_agent_starts_again_with_the_system_allocator_and_the_rest_of_its_environment() -> None:
    environ = {"PATH": "/usr/bin", "FLOWER_SYNCER_REPO": "/srv/config.git"}
    assert agent_environment(environ) == {**environ, "PYTHONMALLOC": "malloc", "MALLOC_ARENA_MAX": "2"}


def test_an_allocator_the_user_chose_wins_and_the_restarted_process_runs_as_it_is() -> None:
    assert agent_environment({"PYTHONMALLOC": "pymalloc"}) is None
    assert agent_environment({**SETTINGS}) is None  # the process started again: no second restart


def test_an_arena_cap_the_user_set_is_kept() -> None:
    assert agent_environment({"MALLOC_ARENA_MAX": "4"}) == {"MALLOC_ARENA_MAX": "4", "PYTHONMALLOC": "malloc"}
