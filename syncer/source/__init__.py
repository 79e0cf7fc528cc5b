"""The Git source: fetches revisions of the config repository and reports changes (no Kubernetes here).

- ``git``: ``GitSource`` / ``SourceSpec`` / ``Checkout`` / ``SourceError``
- ``watch``: ``LocalRepoWatcher`` (local repositories) -- a trigger, never fetches (remotes are polled by the
  agent's source thread, with jitter)
- ``webhook``: ``verify`` for GitHub, GitLab and generic push webhooks (pure)
"""
