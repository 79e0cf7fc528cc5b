"""One action per verb, shared by the CLI and the agent's HTTP API (helm's pkg/action is the
model): each is a function that takes what it needs (a Kube, a client, selectors) and returns a
typed result or raises a typed error. The CLI only maps arguments to an action and a printer.
"""
