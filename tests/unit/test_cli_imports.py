"""Each verb imports what it uses (issue 28): `validate` and `render`, which pre-commit hooks and CI
steps run on every change, load neither the agent, the HTTP server, the metrics, the Kubernetes
client nor GitPython; `--help` not even the repository's models. Each verb runs in a fresh interpreter, which
then reports its `sys.modules`. (How long they take is bench/cli_startup.py's business, not a test's.)
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "config" / "examples"

NOT_FOR_OFFLINE_VERBS = (
    "syncer.agent.agent", "syncer.agent.runner",  # the agent
    "syncer.http",  # its HTTP server
    "syncer.observe.metrics", "prometheus_client",  # the metrics
    "kubernetes", "syncer.cluster.client",  # the Kubernetes client
    "git",  # GitPython (only a repository's derived name needs it; these verbs never do)
    "structlog",  # the agent's logging
    "syncer.agent.config",  # the agent's settings: `run`'s options, added only when `run` is parsed or shown
)
# the repository's models, their SOPS decryption and pydantic, which they are written in
MODELS = ("syncer.models.federation", "syncer.models.supernode", "syncer.actions.load", "syncer.render.repo",
          "cryptography", "pydantic")

_RUN = """
import contextlib, io, json, sys
{preload}
from syncer.cli import main
with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
    try:
        code = main(sys.argv[1:])
    except SystemExit as exc:
        code = exc.code
print(json.dumps({{"code": code, "modules": sorted(sys.modules)}}))
"""


def modules_after(argv: list[str], preload: str = "") -> tuple[object, set[str]]:
    """The exit code of `flower-syncer ARGV` in a fresh interpreter, and the modules it loaded."""
    done = subprocess.run([sys.executable, "-c", _RUN.format(preload=preload), *argv], cwd=ROOT,
                          capture_output=True, text=True, check=True, timeout=120)
    out = json.loads(done.stdout.splitlines()[-1])
    return out["code"], set(out["modules"])


def loaded(modules: set[str], names: tuple[str, ...]) -> list[str]:
    """Of `names` (packages or modules), those `modules` holds, itself or a submodule."""
    return sorted(n for n in names if any(m == n or m.startswith(n + ".") for m in modules))


@pytest.mark.parametrize("argv", [["validate", str(EXAMPLES)], ["render", str(EXAMPLES)],
                                  ["validate", str(EXAMPLES), "-o", "json"]], ids=" ".join)
def test_offline_verbs_load_nothing_of_the_cluster_or_the_agent(argv: list[str]) -> None:
    code, modules = modules_after(argv)
    assert code == 0  # the examples are valid: the verb really ran
    assert "syncer.models.federation" in modules
    assert loaded(modules, NOT_FOR_OFFLINE_VERBS) == []


@pytest.mark.parametrize("argv", [["--help"], ["validate", "--help"], ["sync", "--help"]], ids=" ".join)
def test_help_loads_no_models_either(argv: list[str]) -> None:
    code, modules = modules_after(argv)
    assert code == 0
    assert loaded(modules, NOT_FOR_OFFLINE_VERBS + MODELS) == []


def test_run_shows_every_setting_of_the_agent() -> None:
    """`run`'s options are added when it is used: its help lists a flag for each of the agent's settings."""
    from syncer.agent.config import AgentConfig

    done = subprocess.run([sys.executable, "-m", "syncer", "run", "--help"], cwd=ROOT, capture_output=True,
                          text=True, check=True, timeout=60)
    flags = set(re.findall(r"--[a-z-]+", done.stdout))
    missing = [name for name in AgentConfig.model_fields if "--" + name.replace("_", "-") not in flags]
    assert missing == [] and "--config" in flags


def test_the_check_sees_a_module_that_should_not_be_there() -> None:
    """The check itself can fail: a verb that pulled in the metrics would be caught."""
    _, modules = modules_after(["--help"], preload="import syncer.observe.metrics")
    assert loaded(modules, NOT_FOR_OFFLINE_VERBS) == ["prometheus_client", "structlog", "syncer.observe.metrics"]


def test_the_agent_never_formats_with_rich_even_where_it_is_installed() -> None:
    """flwr brings rich into a venv (the agent's image has none): structlog would format the
    console and tracebacks with it, and the agent would carry its 80 modules."""
    installed = subprocess.run([sys.executable, "-c", "import rich"], check=False, capture_output=True, timeout=60)
    if installed.returncode != 0:  # flwr, a dev dependency, brings it: the check means something only there
        pytest.skip("rich is not installed here")
    run = ["run", "--repo", "/nonexistent", "--interval", "-1"]  # refused once the agent's modules are loaded
    code, modules = modules_after(run)
    assert code == 2 and "syncer.agent.runner" in modules and "structlog.dev" in modules
    assert [m for m in modules if m.startswith(("rich.", "pygments"))] == []  # "rich" itself: None, blocked
    _, modules = modules_after(run, preload="import rich.console")
    assert "rich.console" in modules  # the check can fail: a process that imported rich keeps it
