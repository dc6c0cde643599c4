#!/bin/sh
# Install one role of sits-observe into a fresh virtual environment: the Dockerfile's only
# install step (one RUN per image), and what tests/integration/test_install_image.py replays
# into a temporary directory, since no image can be built there.
#
#   PYTHON=python3 deploy/image/install.sh ROLE VENV LOCK WHEEL_DIR
#
# ROLE is `agent` or `service` (the extras of pyproject.toml; the lock is
# requirements-ROLE.lock, pinned within requirements.lock by `make lock`), VENV the target
# directory, WHEEL_DIR a folder holding the sits_observe wheel (`pip wheel --no-deps .`).
#
# - The venv has no pip or setuptools: the host's pip installs into it (`pip --python`,
#   pip >= 22.3), so the image carries no installer.
# - Only wheels (`--only-binary=:all:`): nothing is compiled in the image, and a pin without
#   a wheel for the image's Python fails the build instead of pulling a compiler in.
# - Bytecode is compiled at install time (pip's default): the root filesystem is read-only
#   at run time and PYTHONDONTWRITEBYTECODE=1 is set, so nothing is written there.
# - The agent's pyarrow is trimmed of what no agent code path loads: Arrow Flight and the S3
#   filesystem (pyarrow.lib links neither: only pyarrow._flight and pyarrow._s3fs do, and
#   pyarrow.fs treats a missing _s3fs as "S3 not built"), C++ headers, Cython sources and
#   the test suites of pyarrow and numpy. The replay test runs the trimmed install.
set -eu

if [ "$#" -ne 4 ]; then
  echo "usage: install.sh agent|service VENV LOCK WHEEL_DIR" >&2
  exit 2
fi
role=$1 venv=$2 lock=$3 wheels=$4
python=${PYTHON:-python3}

case "$role" in
  agent|service) ;;
  *) echo "install.sh: unknown role '$role' (allowed: agent, service)" >&2; exit 2 ;;
esac
set -- "$wheels"/sits_observe-*.whl
if [ "$#" -ne 1 ] || [ ! -f "$1" ]; then
  echo "install.sh: expected exactly one sits_observe wheel in $wheels" >&2
  exit 2
fi
wheel=$1

"$python" -m venv --without-pip "$venv"
pip() {
  "$python" -m pip --python "$venv/bin/python" install --no-cache-dir --disable-pip-version-check \
    --only-binary=:all: --quiet "$@"
}
pip -r "$lock"
pip --no-deps "$wheel"
# The role's console scripts only: the extras decide what the commands can import.
test -x "$venv/bin/sits-observe-agent"

if [ "$role" = agent ]; then
  site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  rm -rf "$site"/pyarrow/libarrow_flight.so* "$site"/pyarrow/libarrow_python_flight.so* \
    "$site"/pyarrow/_flight.*.so "$site"/pyarrow/libarrow_s3.so* "$site"/pyarrow/_s3fs.*.so \
    "$site"/pyarrow/include "$site"/pyarrow/src "$site"/pyarrow/tests
  find "$site/pyarrow" -name '*.pxd' -o -name '*.pyx' -o -name '*.pxi' | xargs rm -f
  find "$site/numpy" -type d -name tests -prune -exec rm -rf {} +
fi
