# syntax=docker/dockerfile:1
# sits-observe images, one per role, built from the extras of pyproject.toml
# (docs/install.md, "Images"):
#
#   docker build --target service -t REGISTRY/sits-observe:0.1.0 .        # serve, controller, CLI
#   docker build --target agent   -t REGISTRY/sits-observe-agent:0.1.0 .  # the node agent
#
# Both images run as 65532:65532 (the manifests' runAsUser) and write nothing outside their
# volumes, so readOnlyRootFilesystem holds: bytecode is compiled at build time,
# PYTHONDONTWRITEBYTECODE stops any later write, and HOME is /tmp (the manifests mount an
# emptyDir there) for any library that caches under ~. Each role's install is one script,
# deploy/image/install.sh, which tests/integration/test_install_image.py replays into a fresh
# venv (with the Python named below) and weighs, since no image can be built in CI.
ARG PYTHON_VERSION=3.12
ARG BASE=python:${PYTHON_VERSION}-slim-bookworm

# -- the project's wheel ------------------------------------------------------------------------
FROM ${BASE} AS wheel
WORKDIR /src
COPY pyproject.toml README.md ./
COPY sits_observe ./sits_observe
RUN python -m pip wheel --no-cache-dir --no-deps --wheel-dir /wheels .

# -- one venv per role, from its lock (requirements-ROLE.lock) ------------------------------------
FROM ${BASE} AS agent-build
COPY deploy/image/install.sh requirements-agent.lock /build/
COPY --from=wheel /wheels /wheels
RUN sh /build/install.sh agent /opt/sits-observe /build/requirements-agent.lock /wheels

FROM ${BASE} AS service-build
COPY deploy/image/install.sh requirements-service.lock /build/
COPY --from=wheel /wheels /wheels
RUN sh /build/install.sh service /opt/sits-observe /build/requirements-service.lock /wheels

# -- the node agent: no store, no service, no UI (collectors/daemonset.yaml) ---------------------
FROM ${BASE} AS agent
COPY --from=agent-build /opt/sits-observe /opt/sits-observe
ENV PATH=/opt/sits-observe/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp
USER 65532:65532
EXPOSE 9464
ENTRYPOINT ["sits-observe-agent"]

# -- the service: `sits-observe serve` (deploy/deployment.yaml); the default target ---------------
FROM ${BASE} AS service
COPY --from=service-build /opt/sits-observe /opt/sits-observe
ENV PATH=/opt/sits-observe/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp
USER 65532:65532
EXPOSE 8080 8081
ENTRYPOINT ["sits-observe"]
CMD ["serve", "--help"]
