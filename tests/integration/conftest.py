"""Fixtures shared by the integration tests (besides tests/conftest.py's): the pinned `helm` and
a `second_namespace`, defined beside their helpers in tests/integration/charts.py."""

from tests.integration.charts import helm, second_namespace  # noqa: F401
