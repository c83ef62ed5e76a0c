#!/usr/bin/env bash
# Set up dtgui on Debian/Ubuntu and run it or its tests.
#   bash packaging/dev.sh run     system packages + .venv, then open the app
#   bash packaging/dev.sh test    the same + test packages, then lint and the whole test suite
#   bash packaging/dev.sh lint    test packages, then ruff and mypy only
#   bash packaging/dev.sh setup   only set up
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
VENV=${DTGUI_VENV:-$ROOT/.venv}
MODE=${1:-run}
shift || true

APT_RUN=(python3 python3-venv python3-pip
  libegl1 libgl1 libfontconfig1 libdbus-1-3 libxkbcommon0 libxkbcommon-x11-0
  libxcb-icccm4 libxcb-keysyms1 libxcb-cursor0 libxcb-image0 libxcb-render-util0
  libxcb-shape0 libxcb-randr0 libxcb-xinerama0 libxcb-xkb1 libxcb-xfixes0 fonts-dejavu-core)
APT_TEST=(xvfb xauth openssh-server iproute2 procps dbus dbus-x11 gnome-keyring nftables
  desktop-file-utils slurmctld slurmd slurm-client munge)

need_apt() {
  local missing=()
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "dtgui: installing Debian packages: ${missing[*]}"
  local sudo=""
  [ "$(id -u)" -ne 0 ] && sudo=sudo
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

setup() {
  if command -v apt-get >/dev/null; then
    need_apt "${APT_RUN[@]}"
    [ "$MODE" = test ] && need_apt "${APT_TEST[@]}"
  fi
  if [ ! -x "$VENV/bin/python" ]; then
    echo "dtgui: creating $VENV"
    python3 -m venv "$VENV"
  fi
  local extras=""
  if [ "$MODE" = test ] || [ "$MODE" = lint ]; then extras="[test]"; fi
  local stamp="$VENV/.dtgui-installed$extras"
  if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
    echo "dtgui: installing Python packages into $VENV (TensorFlow is large: a few minutes the first time)"
    "$VENV/bin/python" -m pip install -q --upgrade pip
    "$VENV/bin/python" -m pip install -q -e ".$extras"
    touch "$stamp"
  fi
}

# ruff and mypy read their settings (rules, checked files, strictness) from pyproject.toml.
lint() {
  echo "dtgui: ruff"
  "$VENV/bin/python" -m ruff check dtgui tests packaging
  echo "dtgui: mypy"
  "$VENV/bin/python" -m mypy
}

case "$MODE" in
  setup) setup ;;
  lint)
    setup
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
    setup
    lint
    export QT_QPA_PLATFORM=offscreen
    # the 25 slowest tests are listed at the end: where the suite's time goes
    # Tests wait on processes, SSH and training more than they compute: two or more at once
    # (one worker holds the machine-wide labs, see tests/conftest.py).
    exec "$VENV/bin/python" -m pytest -q -n auto --maxprocesses 4 --dist loadgroup --durations=25 "$@"
    ;;
  *) echo "usage: bash packaging/dev.sh run|test|lint|setup" >&2; exit 2 ;;
esac
