"""The parts of the official Kubernetes client the agent uses (the kubeconfig and in-cluster
loaders, `Configuration`, `ApiClient`'s request building and the REST layer over urllib3),
imported without the generated API classes and models.

`import kubernetes` runs `kubernetes/__init__.py`, which imports the whole client: the watch
helpers, `stream` with its websocket client, `dynamic`, `utils` with the YAML-to-API helpers,
`leaderelection`, `informer`, and (in a client whose `kubernetes.client` does not export lazily)
every generated API class and model. flower-syncer sends its own paths and reads raw JSON, so it
needs none of them, and they made the agent's process noticeably larger after its imports.
Here the packages `kubernetes`,
`kubernetes.client`, `kubernetes.client.models` and `kubernetes.utils` are registered without
running their `__init__`: a submodule imports as usual, the few names the loaders import from
`kubernetes.client` come from their submodules, and any other name runs the package's own
`__init__` on first use, so code that wants the whole client (a test, a library sharing the
process) still gets it, just later.

When `kubernetes` was imported before (whole), it is used as it is. When the installed client is
laid out differently (a name moved), the whole client is imported the usual way instead: the
saving is lost, nothing else.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import threading
from collections.abc import Mapping
from types import ModuleType
from typing import Any

# the names imported from `kubernetes.client` by the modules used here, by the submodule defining them
CLIENT_NAMES: Mapping[str, str] = {
    "ApiClient": "api_client",
    "Configuration": "configuration",
    "ApiException": "exceptions",
    "ApiValueError": "exceptions",
    "OpenApiException": "exceptions",
}
# the packages whose `__init__` waits (`kubernetes.utils`: the REST layer imports two of its
# submodules, and its `__init__` loads the YAML-to-API helpers)
DEFERRED = ("kubernetes", "kubernetes.client", "kubernetes.client.models", "kubernetes.utils")

_LOCK = threading.Lock()
_waiting: set[str] = set()  # the packages registered here whose own `__init__` has not run yet


def load() -> tuple[Any, Any, Any]:
    """(`kubernetes.client.configuration.Configuration`, `kubernetes.client.api_client.ApiClient`,
    the `kubernetes.config` module)."""
    with _LOCK:
        if "kubernetes" not in sys.modules:
            try:
                return _load(light=True)
            except (ImportError, AttributeError):
                _waiting.clear()
                for name in [n for n in sys.modules if n == "kubernetes" or n.startswith("kubernetes.")]:
                    del sys.modules[name]
        return _load(light=False)


def _load(*, light: bool) -> tuple[Any, Any, Any]:
    if light:
        for name in DEFERRED:
            _defer(name, CLIENT_NAMES if name == "kubernetes.client" else {})
    configuration = importlib.import_module("kubernetes.client.configuration")
    api_client = importlib.import_module("kubernetes.client.api_client")
    importlib.import_module("kubernetes.client.rest")
    importlib.import_module("kubernetes.client.exceptions")
    config = importlib.import_module("kubernetes.config")
    return configuration.Configuration, api_client.ApiClient, config


def _defer(name: str, names: Mapping[str, str]) -> None:
    """Registers package `name` without running its `__init__` (see the module's docstring)."""
    spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None or spec.submodule_search_locations is None:
        raise ImportError(f"{name} is not a package here")
    module = importlib.util.module_from_spec(spec)
    loader = spec.loader

    def __getattr__(attr: str) -> Any:
        if attr in names:
            return getattr(importlib.import_module(f"{name}.{names[attr]}"), attr)
        if not attr.startswith("__") and importlib.util.find_spec(f"{name}.{attr}") is not None:
            return importlib.import_module(f"{name}.{attr}")  # a submodule (`from kubernetes.client import rest`)
        # anything else: the package whole, as `import` would have made it
        module.__dict__.pop("__getattr__", None)
        _waiting.discard(name)
        loader.exec_module(module)
        return getattr(module, attr)

    module.__getattr__ = __getattr__  # type: ignore[method-assign]
    sys.modules[name] = module
    _waiting.add(name)
    parent, _, child = name.rpartition(".")
    if parent:
        setattr(sys.modules[parent], child, module)


def is_whole(module: ModuleType) -> bool:
    """Whether a package's own `__init__` has run (for tests)."""
    return module.__name__ not in _waiting
