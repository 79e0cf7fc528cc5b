# syntax=docker/dockerfile:1
# flower-syncer agent image: `docker build -t flower-syncer .`
#
# Built without a Docker engine by `python3 tools/images.py agent` (Debian's buildah), and run by
# tests/e2e/test_agent_pod.py: installed with the Helm chart on a real node, it syncs a push.
#
# Runs `flower-syncer run` as the non-root user 65532 (the Helm chart in charts/flower-syncer
# sets the same user, a read-only root filesystem and writable emptyDirs for the cache and /tmp).

ARG PYTHON_IMAGE=python:3.11-slim

# --- builder: wheels for the project and every dependency -------------------------------------
FROM ${PYTHON_IMAGE} AS builder
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY syncer ./syncer
RUN pip wheel --wheel-dir /wheels .

# --- final: the runtime only (git and ssh for fetching, gpg and ssh-keygen for signed commits; no compilers, no wheels left behind) ----
FROM ${PYTHON_IMAGE}
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
RUN apt-get update \
 && apt-get install -y --no-install-recommends git openssh-client gpg ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --gid 65532 flower-syncer \
 && useradd --uid 65532 --gid 65532 --create-home --home-dir /home/flower-syncer \
      --shell /usr/sbin/nologin flower-syncer
# The wheels are bind-mounted from the builder, so they never become a layer of this image.
RUN --mount=type=bind,from=builder,source=/wheels,target=/wheels \
    pip install --no-index --find-links=/wheels flower-syncer \
 && flower-syncer --version
USER 65532:65532
WORKDIR /home/flower-syncer
# HTTP server (metrics, health, API, webhook); listen on it with FLOWER_SYNCER_LISTEN=0.0.0.0:9090.
EXPOSE 9090
ENTRYPOINT ["flower-syncer"]
CMD ["run"]
