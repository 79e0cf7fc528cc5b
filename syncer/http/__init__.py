"""The agent's HTTP server: metrics, health, the status/resync API and the Git webhook.

Standard library only: an event loop reads request heads, a thread per request serves them (see
`AgentServer` for the limits that keep slow and many clients from starving the health probes):

=======  ==================  =============================================================================
method   path                answer
=======  ==================  =============================================================================
GET      ``/metrics``        Prometheus text format (with `protect_reads`: bearer token, else 401)
GET      ``/healthz``        200 ``ok`` / 503 (the agent's loops are stuck)
GET      ``/readyz``         200 ``ok`` / 503 with the reason
GET      ``/api/v1/status``  the agent's status (JSON) (with `protect_reads`: bearer token, else 401)
POST     ``/api/v1/resync``  ``Authorization: Bearer <token>``; body ``{"unit", "wait", "timeout"}``, all
                             optional; 200 with the result, 401, 400, 404 (unknown unit; or no token is
                             configured), 413
POST     ``/hooks/git``      a push webhook (GitHub, GitLab, generic; see `syncer.source.webhook`): 202
                             accepted, 200 ``{"duplicate": true}`` for a delivery id seen within
                             ``replay_window`` (nothing happens), 401 rejected (nothing happens), 404
                             when no secret is configured, 413 over ``MAX_BODY_BYTES``
=======  ==================  =============================================================================

GET routes answer HEAD too. Errors are JSON ``{"error": "..."}``. Requests are logged at debug
level: method, path without the query, status, time and client address, never headers or bodies.
What a client can repeat at will (rejected webhooks and tokens, malformed requests, refused
connections, and our own 500s) is logged at most once per `reject_log_interval` seconds per kind,
with the count of lines suppressed meanwhile (on the next line, or on a summary line once the flood
is over). A client error is a 4xx and logs no traceback.

Modules: `limits` (what the server accepts, the agent protocol, errors), `server` (the event loop
that reads request heads and guards the slots), `handler` (one request, the routes).
"""

from syncer.http.limits import MAX_API_BODY_BYTES, MAX_HEAD_BYTES, AgentAPI, HttpError
from syncer.http.server import AgentServer

__all__ = ["MAX_API_BODY_BYTES", "MAX_HEAD_BYTES", "AgentAPI", "AgentServer", "HttpError"]
