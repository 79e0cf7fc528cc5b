"""The Git source: fetches revisions of the config repository and reports changes (no Kubernetes here).

- ``git``: ``GitSource`` / ``SourceSpec`` / ``Checkout`` / ``SourceError``
- ``watch``: ``LocalRepoWatcher`` (local repositories) and ``Poller`` (remotes) -- triggers, never fetch
- ``webhook``: ``verify`` for GitHub, GitLab and generic push webhooks (pure)
"""
