#!/usr/bin/env bash
# The Debian packages the test suite uses, installed with apt where it can (root or sudo on a
# Debian-like machine). Never fails: where a package cannot be installed, the tests that need
# it skip and say why.
#   libosmesa6  MuJoCo's software OpenGL (MUJOCO_GL=osmesa) for the Meta-World tests
#   chromium    headless browser for the HTML report test
# SYSTEM_DEPS=0 skips this step (a machine you do not want apt to touch).
set -uo pipefail
[ "${SYSTEM_DEPS:-1}" = 0 ] && { echo "system packages: skipped (SYSTEM_DEPS=0)"; exit 0; }
want=()
ldconfig -p 2>/dev/null | grep -q libOSMesa || want+=(libosmesa6)
command -v chromium >/dev/null 2>&1 || want+=(chromium)
[ ${#want[@]} = 0 ] && exit 0
SUDO=""
if [ "$(id -u)" != 0 ]; then
  if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then SUDO="sudo -n"; fi
fi
if ! command -v apt-get >/dev/null 2>&1 || { [ "$(id -u)" != 0 ] && [ -z "$SUDO" ]; }; then
  echo "note: not installed (no apt-get, or not root): ${want[*]}; the tests that need them skip"
  exit 0
fi
echo "system packages: installing ${want[*]} with apt"
if ! { $SUDO apt-get update -qq &&
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
    "${want[@]}" >/dev/null; }; then
  echo "note: apt could not install ${want[*]}; the tests that need them skip"
fi
exit 0
