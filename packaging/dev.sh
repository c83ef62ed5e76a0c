#!/usr/bin/env bash
# Set up dtgui on Debian/Ubuntu and run it or its tests.
#   bash packaging/dev.sh run     system packages + .venv, then open the app
#   bash packaging/dev.sh test    the same + test packages, then lint and the whole test suite
#   bash packaging/dev.sh fast    test packages, then the fast tier: no TensorFlow, no test hosts
#   bash packaging/dev.sh lint    test packages, then ruff and mypy only
#   bash packaging/dev.sh setup   only set up
# DTGUI_VENV picks the venv (default .venv here); CI keeps one a dependency set (.ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
VENV=${DTGUI_VENV:-$ROOT/.venv}
MODE=${1:-run}
shift || true

# Qt's system libraries: the list the app names when Qt's xcb plugin cannot load.
mapfile -t QT_PACKAGES < dtgui/resources/qt-debian-packages.txt
APT_RUN=(python3 python3-venv python3-pip "${QT_PACKAGES[@]}")
APT_TEST=(xvfb xauth openssh-server iproute2 procps dbus dbus-x11 gnome-keyring nftables
  desktop-file-utils slurmctld slurmd slurm-client munge)

need_apt() {
  local installed missing=() p
  # one dpkg-query for them all: what it does not list as installed is missing
  installed=$(dpkg-query -W -f='${Package} ${Status}\n' "$@" 2>/dev/null || true)
  for p in "$@"; do
    grep -qx "$p install ok installed" <<<"$installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "dtgui: installing Debian packages: ${missing[*]}"
  local sudo=""
  [ "$(id -u)" -ne 0 ] && sudo=sudo
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# `timed LABEL COMMAND...`: runs the command, then says how long it took (where CI's time
# goes: set-up, ruff, mypy; pytest prints its own).
timed() {
  local label=$1 start=${EPOCHREALTIME//[!0-9]/}
  shift
  "$@"
  local tenths=$(( (${EPOCHREALTIME//[!0-9]/} - start) / 100000 ))
  echo "dtgui: $label took $((tenths / 10)).$((tenths % 10)) s"
}

# The stamp holds pyproject.toml's hash (not its date: a fresh clone's files are all new) and
# the checkout the venv's editable install points at. A new hash installs everything; a venv
# that served another checkout with the same dependencies only gets this checkout installed.
python_packages() {
  local extras=$1
  local stamp="$VENV/.dtgui-installed$extras" deps had=""
  deps=$(sha256sum pyproject.toml | cut -d' ' -f1)
  [ -f "$stamp" ] && had=$(cat "$stamp")
  [ "$had" = "$deps $ROOT" ] && return 0
  if [ "${had%% *}" = "$deps" ]; then
    echo "dtgui: installing this checkout into $VENV (its dependencies are there already)"
    "$VENV/bin/python" -m pip install -q --no-deps -e ".$extras"
  else
    echo "dtgui: installing Python packages into $VENV (TensorFlow is large: a minute or more the first time)"
    # uv resolves to the same versions as pip and downloads in parallel: a cold install took
    # 46 s with uv and 196 s with pip here (docs/testing.md); pip does it where uv cannot
    # (a registry only pip's own configuration reaches). Bytecode is compiled at install, as
    # pip does: a process that cannot write __pycache__ (the SSH test account's TensorFlow)
    # would otherwise compile thousands of modules at every start.
    { "$VENV/bin/python" -m pip install -q --disable-pip-version-check uv \
        && "$VENV/bin/python" -m uv pip install -q --compile-bytecode --python "$VENV/bin/python" \
          -e ".$extras"; } \
      || "$VENV/bin/python" -m pip install -q -e ".$extras"
  fi
  echo "$deps $ROOT" > "$stamp"
}

# The tests' own target kind, a distribution of its own (tests/plugins/pool): installed from
# this checkout, so that the kinds' registry finds it as it finds any plugin.
test_plugins() {
  local found
  found=$("$VENV/bin/python" -c 'import dtgui_pool, os; print(os.path.dirname(os.path.dirname(dtgui_pool.__file__)))' 2>/dev/null || true)
  [ "$found" = "$ROOT/tests/plugins/pool" ] && return 0
  echo "dtgui: installing the test plugin tests/plugins/pool into $VENV"
  "$VENV/bin/python" -m uv pip install -q --python "$VENV/bin/python" --no-deps -e tests/plugins/pool \
    || "$VENV/bin/python" -m pip install -q --no-deps -e tests/plugins/pool
}

# MLflow's UI (the app's "Open in MLflow", dtgui/launch/trackers/mlflow_ui.py, and the tests'
# `mlflow server`): the full mlflow (Flask, pandas, scikit-learn...) in a venv of its own
# inside dtgui's venv, at the version of dtgui's mlflow client (the store's tables are that
# version's). In dtgui's venv itself Keras would import scikit-learn and pandas into every
# training process (pyproject.toml).
MLFLOW_SERVER=$VENV/mlflow-server
mlflow_server() {
  local version stamp="$MLFLOW_SERVER/.dtgui-installed"
  version=$("$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("mlflow-skinny"))')
  [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$version" ] && return 0
  echo "dtgui: installing MLflow's UI $version into $MLFLOW_SERVER"
  rm -rf "$MLFLOW_SERVER"
  python3 -m venv "$MLFLOW_SERVER"
  "$VENV/bin/python" -m uv pip install -q --python "$MLFLOW_SERVER/bin/python" "mlflow==$version" \
    || "$MLFLOW_SERVER/bin/python" -m pip install -q "mlflow==$version"
  echo "$version" > "$stamp"
}

setup() {
  local apt_test=""
  if command -v apt-get >/dev/null; then
    need_apt "${APT_RUN[@]}"  # python3-venv among them: the venv is made with it
    if [ "$MODE" = test ] || [ "$MODE" = fast ]; then  # the test machinery (sshd, Slurm, ...) installs while pip does
      need_apt "${APT_TEST[@]}" &
      apt_test=$!
    fi
  fi
  if [ ! -x "$VENV/bin/python" ]; then
    echo "dtgui: creating $VENV"
    python3 -m venv "$VENV"
  fi
  # runs into MLflow: the client (docs/mlflow.md); TensorBoard's Profile tab (XProf)
  local extras="[mlflow,profile]"
  if [ "$MODE" != run ] && [ "$MODE" != setup ]; then extras="[mlflow,profile,test]"; fi
  python_packages "$extras"
  if [ "$MODE" != run ] && [ "$MODE" != setup ]; then test_plugins; fi
  if [ "$MODE" != lint ]; then mlflow_server; fi  # what Open in MLflow starts
  if [ -n "$apt_test" ]; then wait "$apt_test"; fi
}

# ruff and mypy read their settings (rules, checked files, strictness) from pyproject.toml.
lint() {
  echo "dtgui: ruff"
  timed ruff "$VENV/bin/python" -m ruff check dtgui tests packaging
  echo "dtgui: mypy"
  timed mypy "$VENV/bin/python" -m mypy
}

# Tests wait on processes, SSH and training more than they compute: one pytest worker more than
# the cores (two workers kept 2 cores 72 % busy; see docs/testing.md), at most four, each with
# its own SSH lab (tests/sshhosts.py).
workers=$(( $(nproc) + 1 )); [ "$workers" -gt 4 ] && workers=4

case "$MODE" in
  setup) timed set-up setup ;;
  lint)
    timed set-up setup
    lint
    ;;
  run)
    setup
    if [ -z "${DISPLAY:-}" ] && [ -z "${WAYLAND_DISPLAY:-}" ]; then
      echo "dtgui: no display found; starting it on a virtual screen (Xvfb). Use a desktop session to see it."
      need_apt xvfb xauth
      exec xvfb-run -a -s "-screen 0 1600x1000x24" "$VENV/bin/dtgui" "$@"
    fi
    exec "$VENV/bin/dtgui" "$@"
    ;;
  test)
    timed set-up setup
    lint
    export QT_QPA_PLATFORM=offscreen
    # the 25 slowest tests are listed at the end: where the suite's time goes
    exec "$VENV/bin/python" -m pytest -q -n "$workers" --dist loadgroup --durations=25 "$@"
    ;;
  fast)
    timed set-up setup
    export QT_QPA_PLATFORM=offscreen
    exec "$VENV/bin/python" -m pytest -q -n "$workers" --dist loadgroup --durations=10 \
      -m "not slow and not lab" "$@"
    ;;
  *) echo "usage: bash packaging/dev.sh run|test|fast|lint|setup" >&2; exit 2 ;;
esac
