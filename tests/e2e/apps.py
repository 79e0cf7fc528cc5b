"""What the end-to-end tests train: the tiny numpy Flower app (`APP`, tests/fixtures/e2e-app), the
Flower releases they run (`FLWR`, `OLD_FLWR`), the Federation that trains it (`federation`) and
the line each ClientApp prints (`CLIENT_LINE`). Also read by tests/unit/test_images_versions.py
(the images built are the releases run). A helper module, not a test module: tests import from
here, never from each other."""

from __future__ import annotations

import re
from pathlib import Path

APP = Path(__file__).resolve().parent.parent / "fixtures" / "e2e-app"
FLWR = "1.42.0"  # the newest served release: the images' Flower, and the `flwr` CLI the tests run
OLD_FLWR = "1.26.0"  # the gRPC era (the dev extras' flwr)
FEDERATION = """\
apiVersion: flwr.exalsius.ai/v1
kind: Federation
metadata:
  name: train
spec:
  mode: StatefulSet
  isolationMode: {isolation}
  superlink:
    image: flwr/superlink:{flwr}{superexec_image}
  supernodes:
    image: flwr/supernode:{flwr}
    pools:
      - name: p
        replicas: {replicas}
        images: {images}
        nodeConfig:
          partition-id: "{{index}}"
          num-partitions: "{{replicas}}"
"""


def federation(isolation: str, replicas: int, flwr: str = FLWR) -> str:
    """The Federation document; process isolation runs the apps in SuperExec sidecars."""
    process = isolation == "process"
    return FEDERATION.format(
        isolation=isolation, flwr=flwr, replicas=replicas,
        superexec_image=f"\n    superexecImage: flwr/superexec:{flwr}" if process else "",
        images=f"{{superexecClientApp: flwr/superexec:{flwr}}}" if process else "{}",
    )


CLIENT_LINE = re.compile(r"E2E-CLIENT partition-id=(\S+) \((\w+)\) num-partitions=(\S+) \((\w+)\)")
