"""The YAML examples of the SuperNode chart's docs (001_*.txt), with the indentation the scrape
lost restored: rendered by tests/unit/test_supernode.py, and parsed with every Flower release's own
parser by tests/integration/test_flower_compat.py. A helper module, not a test module."""

PYTORCH = """\
supernode:
  superlink:
    address: my-superlink.example.com
    port: 9092
  node:
    config:
      partition-id: 0
      num-partitions: 2
  image:
    registry: myregistry.example.com
    repository: flwr/supernode
    tag: 1.20.0-pytorch
"""

TENSORFLOW = """\
supernode:
  replicas: 3
  superlink:
    address: my-other-superlink.example.com
    port: 9092
  node:
    config:
      partition-id: 1
      num-partitions: 2
  image:
    registry: myregistry.example.com
    repository: flwr/supernode
    tag: 1.20.0-tensorflow
"""

TLS_DEFAULT = """\
tls:
  enabled: true
"""

TLS_EXISTING = """\
tls:
  enabled: true
supernode:
  superlink:
    certificate:
      existingSecret: my-custom-tls-secret-name
"""

TLS_COPY = """\
tls:
  enabled: true
supernode:
  superlink:
    certificate:
      existingSecret: superlink-tls-secret-name
      copyFromExistingSecret:
        enabled: true
        secretName: my-custom-tls-secret-name
"""

NO_TLS = """\
tls:
  enabled: false
"""


ALL_IN_ONE = """\
supernode:
  enabled: true
  isolationMode: process
superexec:
  enabled: true
"""

# "Isolation Distributed", read literally as one values file ...
DISTRIBUTED = """\
supernode:
  enabled: true
superexec:
  enabled: true
  supernode:
    address: my-supernode.example.com
    port: 9094
"""
# ... and as the two installs the text describes: one with the SuperNode, one with the SuperExec.
DISTRIBUTED_SUPERNODE = """\
supernode:
  enabled: true
  isolationMode: process
"""
DISTRIBUTED_SUPEREXEC = """\
supernode:
  enabled: false
superexec:
  enabled: true
  supernode:
    address: my-supernode.example.com
    port: 9094
"""

NODE_CONFIG = """\
supernode:
  node:
    config:
      bool: false
      int: 1
      negative_int: -1
      float: 21.23
      negative_float: -1.34
      string: value 1
      int-as-string: "1"
"""
