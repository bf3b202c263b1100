#!/usr/bin/env bash
# tests/slurm/cluster.sh — a throwaway two-node SLURM cluster on this machine
# for the tests (docs/platform.md, SLURM): its own munge key and socket,
# slurmctld and two slurmd daemons (nodes n1 and n2, simulated on this
# host), every file under DIR.  Needs root and Debian's slurm-wlm + munge.
#
#   tests/slurm/cluster.sh start DIR   start; prints `export SLURM_CONF=...`
#   tests/slurm/cluster.sh stop DIR    stop every daemon started from DIR
#
# `start` waits (under a time limit) until both nodes are idle; it fails
# with the daemons' logs when they are not, and stops what it started.
# Each node declares 4 CPUs whatever the machine has (config_overrides), so
# two-node jobs with a thread per task fit on a 2-core machine.
set -euo pipefail

prog=cluster.sh
die() { echo "$prog: error: $*" >&2; exit 1; }

free_port() {
	/usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

stop() {
	local dir=$1 f pid
	for f in "$dir"/slurmd-n1.pid "$dir"/slurmd-n2.pid "$dir"/slurmctld.pid "$dir"/munged.pid; do
		pid=$(cat "$f" 2>/dev/null) || continue
		if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; fi
	done
	# wait for them (slurmd ends its job steps first)
	for _ in $(seq 50); do
		local alive=0
		for f in "$dir"/slurmd-n1.pid "$dir"/slurmd-n2.pid "$dir"/slurmctld.pid "$dir"/munged.pid; do
			[ -s "$f" ] && kill -0 "$(cat "$f")" 2>/dev/null && alive=1
		done
		[ $alive -eq 0 ] && break
		sleep 0.2
	done
	for f in "$dir"/slurmd-n1.pid "$dir"/slurmd-n2.pid "$dir"/slurmctld.pid "$dir"/munged.pid; do
		if [ -s "$f" ]; then kill -9 "$(cat "$f")" 2>/dev/null || true; fi
		rm -f "$f"
	done
	orphans "$dir"
}

# orphans DIR: kill what this cluster's jobs left running (a job step's
# slurmstepd and its ranks outlive slurmd when a test gave up on them).  A
# later cluster numbers its jobs from 1 again, so a leftover
# "slurmstepd: [15.0]" would pass for its own job 15.  They are told by
# SLURM_CONF=DIR/slurm.conf in their environment (slurmd's, inherited)
# and by being a slurmstepd or a job's process (SLURM_JOB_ID set): the
# shell that runs this has SLURM_CONF too.
orphans() {
	local dir=$1 p env
	for p in /proc/[0-9]*; do
		env=$(tr '\0' '\n' 2>/dev/null < "$p/environ") || continue
		grep -qxF "SLURM_CONF=$dir/slurm.conf" <<< "$env" || continue
		if [ "$(cat "$p/comm" 2>/dev/null)" = slurmstepd ] || grep -q '^SLURM_JOB_ID=' <<< "$env"; then
			kill -9 "${p#/proc/}" 2>/dev/null || true
		fi
	done
}

start() {
	local dir=$1 host ctl p1 p2
	[ "$(id -u)" -eq 0 ] || die "needs root (slurmd and munged run as root here)"
	for c in munged mungekey slurmctld slurmd sbatch scontrol sinfo; do
		command -v "$c" >/dev/null || die "$c not found (apt-get install slurm-wlm munge)"
	done
	mkdir -p "$dir"/state "$dir"/spool/n1 "$dir"/spool/n2 "$dir"/munge
	dir=$(cd "$dir" && pwd)
	host=$(hostname -s)
	ctl=$(free_port) p1=$(free_port) p2=$(free_port)

	# munge: a key of our own, the daemon on a socket of our own
	mungekey --create --keyfile="$dir/munge/munge.key" --force 2>/dev/null ||
		dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 status=none
	chmod 700 "$dir/munge"
	chmod 600 "$dir/munge/munge.key"
	munged --force --key-file="$dir/munge/munge.key" --socket="$dir/munge/socket" \
		--pid-file="$dir/munged.pid" --log-file="$dir/munged.log" \
		--seed-file="$dir/munge/seed" ||
		die "munged did not start: $(tail -n 3 "$dir/munged.log" 2>/dev/null)"

	cat > "$dir/slurm.conf" <<CONF
ClusterName=titantest
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$ctl
AuthType=auth/munge
AuthInfo=socket=$dir/munge/socket
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool/%n
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd-%n.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=pmi2
SlurmdParameters=config_overrides
ReturnToService=2
SchedulerType=sched/backfill
JobCompType=jobcomp/filetxt
JobCompLoc=$dir/jobcomp.txt
MinJobAge=600
KillWait=10
InactiveLimit=0
NodeName=n1 NodeHostname=$host NodeAddr=127.0.0.1 Port=$p1 CPUs=4 RealMemory=4000 State=UNKNOWN
NodeName=n2 NodeHostname=$host NodeAddr=127.0.0.1 Port=$p2 CPUs=4 RealMemory=4000 State=UNKNOWN
PartitionName=debug Nodes=n1,n2 Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
CONF
	export SLURM_CONF=$dir/slurm.conf
	slurmctld -c -f "$SLURM_CONF" || { stop "$dir"; die "slurmctld did not start: $(tail -n 5 "$dir/slurmctld.log")"; }
	for n in n1 n2; do
		slurmd -N "$n" -f "$SLURM_CONF" ||
			{ stop "$dir"; die "slurmd -N $n did not start: $(tail -n 5 "$dir/slurmd-$n.log")"; }
	done
	# both nodes idle, within 30 s
	for _ in $(seq 150); do
		if [ "$(sinfo -h -N -o '%N %t' 2>/dev/null | grep -c ' idle')" -eq 2 ]; then
			echo "export SLURM_CONF=$SLURM_CONF"
			return 0
		fi
		sleep 0.2
	done
	local why
	why=$(sinfo -N 2>&1; tail -n 5 "$dir/slurmctld.log" "$dir"/slurmd-n*.log 2>&1)
	stop "$dir"
	die "the nodes did not become idle in 30 s: $why"
}

[ $# -eq 2 ] || { sed -n '6,7p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
case "$1" in
start) start "$2" ;;
stop) stop "$2" ;;
*) die "unknown command '$1' (start or stop)" ;;
esac
