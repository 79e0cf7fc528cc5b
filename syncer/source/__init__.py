"""The Git source: fetches revisions of the config repository and reports changes (no Kubernetes here).

- ``git``: ``GitSource`` / ``SourceSpec`` / ``Checkout`` / ``SourceError``
- ``watch``: ``LocalRepoWatcher``: local repositories trigger a fetch at once (remotes are polled by the agent)
- ``webhook``: ``verify`` for GitHub, GitLab and generic push webhooks (pure)
"""
