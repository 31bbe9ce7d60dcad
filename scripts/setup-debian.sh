#!/usr/bin/env bash
# Installs the Debian packages tdctl builds, tests and benchmarks with.
set -euo pipefail
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends \
  build-essential cmake pkg-config \
  libelf-dev libdw-dev libfmt-dev libcli11-dev doctest-dev libedit-dev nlohmann-json3-dev \
  libc6-dbg musl-tools strace python3 nodejs openjdk-17-jdk-headless \
  protobuf-compiler python3-jsonschema \
  man-db groff-base sysstat
