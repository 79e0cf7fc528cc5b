"""The Flower SuperNode Helm chart's values (`supernodes/<release>/values.yaml`), in five parts:
`schema` (every documented parameter with its default, and the shared constants), `naming`
(Helm's fullname rules, the Flower interface of an image), `security` (the security-context layout
shared by the checks and the renderer), `keys` (OpenSSH node-auth keys) and `values` (the values
root, its checks and `validate_values`)."""

from syncer.models.supernode.keys import KeyFormatError, OpenSSHKey, parse_openssh_private_key, public_key_problem
from syncer.models.supernode.naming import (
           ReleaseNames,
           chart_name,
           helm_fullname,
           interface,
           release_names,
)
from syncer.models.supernode.security import merge_maps, security_contexts
from syncer.models.supernode.values import SuperNodeValues, validate_values

__all__ = ["KeyFormatError", "OpenSSHKey", "ReleaseNames", "SuperNodeValues", "chart_name",
           "helm_fullname", "interface", "merge_maps", "parse_openssh_private_key", "public_key_problem",
           "release_names", "security_contexts", "validate_values"]
