#!/bin/bash
# contention.sh - the CPU backend under load (issue 17, item 3): `nemotron bench` with one thread,
# with the default team held fixed (NEMOTRON_TEAM=fixed: every pass on every thread, the behaviour
# before src/cpu/team.c), with the adaptive team by timing alone (NEMOTRON_TEAM=timed) and with the
# default adaptive team (timing, and no tries of the team while src/cpu/cpu_load.c reads the cores
# taken), while BUSY other processes each spin a core
# (`yes > /dev/null`, as a desktop's other work or a shared machine's other jobs would).
#
# usage: dev/cpu/contention.sh MODEL [BUSY=1] [THREADS=nproc] [NEMOTRON=build/nemotron] [-- BENCH ARGS]
# e.g.   dev/cpu/contention.sh models/nemotron-h-kjv 1
#        dev/cpu/contention.sh /tmp/mid.nemo 1 2 build/nemotron -- -p 512 -n 64 -r 3
# Prints one block per configuration (its rows, and bench's line of how many passes ran on the
# team and on one thread); the busy loops are this script's children and are ended
# (by their process ids) when it exits, also on Ctrl-C. Other load on the machine adds to BUSY:
# `uptime` before each run says how much there was.
set -u
if [ $# -lt 1 ] || [ ! -e "$1" ]; then
    echo "usage: $0 MODEL [BUSY=1] [THREADS=nproc] [NEMOTRON=build/nemotron] [-- BENCH ARGS]" >&2
    [ $# -ge 1 ] && echo "$0: no model at $1" >&2
    exit 2
fi
model=$1; shift
busy=${1:-1}; [ $# -gt 0 ] && shift
threads=${1:-$(nproc)}; [ $# -gt 0 ] && shift
bin=${1:-build/nemotron}; [ $# -gt 0 ] && shift
[ "${1:-}" = "--" ] && shift
bench_args=("$@")
[ ${#bench_args[@]} -eq 0 ] && bench_args=(-p 512 -n 64 -r 3)
case $busy in ''|*[!0-9]*) echo "$0: BUSY must be a count, not '$busy'" >&2; exit 2 ;; esac
case $threads in ''|*[!0-9]*|0) echo "$0: THREADS must be a positive count, not '$threads'" >&2; exit 2 ;; esac
[ -x "$bin" ] || { echo "$0: no nemotron binary at $bin (make cpu)" >&2; exit 2; }

pids=()
stop() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; }
trap stop EXIT INT TERM
for ((i = 0; i < busy; i++)); do yes > /dev/null & pids+=($!); done
sleep 1

run() { # label, env assignment, threads
    echo "== $1 ($busy busy loops; $(uptime | sed 's/.*load/load/'))"
    env "$2" "$bin" bench -m "$model" -t "$3" "${bench_args[@]}" 2>&1 | grep -E '\| *(pp|tg)[0-9]|^CPU team'
}
run "1 thread" NEMOTRON_TEAM=fixed 1
run "$threads threads, fixed team" NEMOTRON_TEAM=fixed "$threads"
run "$threads threads, adaptive team by timing alone" NEMOTRON_TEAM=timed "$threads"
run "$threads threads, adaptive team (the default: timing and the CPUs' load)" NEMOTRON_TEAM=adapt "$threads"
