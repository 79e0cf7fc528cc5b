"""What the end-to-end tests train: the tiny numpy Flower app (`APP`, tests/fixtures/e2e-app), the
Flower releases they run (`FLWR`, `OLD_FLWR`), the Federation that trains it (`federation`) and
the line each ClientApp prints (`CLIENT_LINE`). Also read by tests/unit/test_images_versions.py
(the images built are the releases run). A helper module, not a test module: tests import from
here, never from each other."""

from __future__ import annotations

import re
from pathlib import Path

from tests import builders

APP = Path(__file__).resolve().parent.parent / "fixtures" / "e2e-app"
FLWR = "1.42.0"  # the newest served release: the images' Flower, and the `flwr` CLI the tests run
OLD_FLWR = "1.26.0"  # the gRPC era (the dev extras' flwr)
def federation(isolation: str, replicas: int, flwr: str = FLWR) -> str:
    """The Federation that trains the app (tests/builders.py's, Flower `flwr`, one pool "p" whose
    node config numbers the partitions); process isolation runs the apps in SuperExec sidecars."""
    process = isolation == "process"
    partitions = '        nodeConfig:\n          partition-id: "{index}"\n          num-partitions: "{replicas}"\n'
    text = builders.federation("train", builders.pool("p", replicas, extra=partitions), version=flwr,
                               isolation=isolation,
                               superlink=f"    superexecImage: flwr/superexec:{flwr}\n" if process else "")
    return text.replace("images: {}", f"images: {{superexecClientApp: flwr/superexec:{flwr}}}") if process else text


CLIENT_LINE = re.compile(r"E2E-CLIENT partition-id=(\S+) \((\w+)\) num-partitions=(\S+) \((\w+)\)")
