#!/usr/bin/env bash
# Make sure a Docker engine answers on this machine, starting one if needed (CI and `make demo`).
#
# No image registry is reachable here, so the engine only needs to run containers from images
# that Worldline builds itself (debootstrap + `docker import`, then `docker build`).
# Steps: (1) an engine already answers -> done; (2) install docker.io and debootstrap from
# Debian if missing; (3) start `dockerd --bridge=none --iptables=false --ip6tables=false` in the
# background with default signal dispositions (shells here may start children with SIGTERM
# ignored), log to $WORLDLINE_DOCKERD_LOG; (4) wait until it answers.
# Exit status: 0 when an engine answers, 1 otherwise (with the reason on stderr).
set -euo pipefail

LOG=${WORLDLINE_DOCKERD_LOG:-/var/log/worldline-dockerd.log}
PIDFILE=${WORLDLINE_DOCKERD_PIDFILE:-/run/worldline-dockerd.pid}
WAIT_S=${WORLDLINE_DOCKERD_WAIT_S:-60}

answers() { docker version --format '{{.Server.Version}}' >/dev/null 2>&1; }

if command -v docker >/dev/null 2>&1 && answers; then
    echo "docker engine: answering ($(docker version --format '{{.Server.Version}}'))"
    exit 0
fi

if [ "$(id -u)" != 0 ]; then
    echo "docker engine: none answers and starting one needs root; run as root:" >&2
    echo "  apt-get install -y docker.io debootstrap && dockerd --bridge=none --iptables=false --ip6tables=false &" >&2
    exit 1
fi

if ! command -v dockerd >/dev/null 2>&1 || ! command -v debootstrap >/dev/null 2>&1; then
    echo "docker engine: installing docker.io and debootstrap from Debian"
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -q docker.io debootstrap >/dev/null 2>&1 || {
        apt-get update -q >/dev/null && apt-get install -y -q docker.io debootstrap >/dev/null; }
fi

if [ -f "$PIDFILE" ] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null; then
    echo "docker engine: dockerd (pid $(cat "$PIDFILE")) is running but not answering yet; waiting"
else
    echo "docker engine: starting dockerd (log: $LOG)"
    mkdir -p "$(dirname "$LOG")"
    # Reset SIGTERM/SIGINT/SIGHUP to their defaults before exec so that dockerd can be stopped by
    # PID later; a shell cannot undo dispositions it was started with, Python can.
    nohup python3 -c 'import os, signal, sys
for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT):
    signal.signal(s, signal.SIG_DFL)
os.setsid()
os.execvp(sys.argv[1], sys.argv[1:])' \
        dockerd --bridge=none --iptables=false --ip6tables=false >>"$LOG" 2>&1 </dev/null &
    echo $! >"$PIDFILE"
fi

for _ in $(seq 1 "$((WAIT_S * 5))"); do
    if answers; then
        echo "docker engine: answering ($(docker version --format '{{.Server.Version}}'), pid $(cat "$PIDFILE"))"
        exit 0
    fi
    if ! kill -0 "$(cat "$PIDFILE")" 2>/dev/null; then
        echo "docker engine: dockerd exited; last lines of $LOG:" >&2
        tail -n 20 "$LOG" >&2
        exit 1
    fi
    sleep 0.2
done
echo "docker engine: dockerd did not answer within ${WAIT_S}s; see $LOG" >&2
exit 1
