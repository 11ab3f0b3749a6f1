#!/usr/bin/env bash
# Runs one mock host's systemd-nspawn and starts it again when the host reboots itself
# (nspawn exits 133 on a container reboot; systemd-nspawn@.service restarts on that status too).
# Usage: nspawn-supervise.sh HOST_ROOT -- systemd-nspawn ARGS...
set -u
shift 2
while true; do
  "$@"
  status=$?
  [ "$status" -eq 133 ] || exit "$status"
done
