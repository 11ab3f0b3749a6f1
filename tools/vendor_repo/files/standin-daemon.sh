#!/bin/sh
# Stand-in for the vendor daemon behind @SERVICE@.service (gpufleet sandbox, package @PACKAGE@ @VERSION@).
# It does nothing but exist: while it runs, its pid file tells gpusim the service is up.
PIDFILE=/run/gpusim/@SERVICE@.pid
mkdir -p /run/gpusim
echo $$ > "$PIDFILE"
trap 'rm -f "$PIDFILE"; exit 0' TERM INT HUP
while :; do
    sleep 60 &
    wait $!
done
