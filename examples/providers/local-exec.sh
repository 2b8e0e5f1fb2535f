#!/usr/bin/env bash
# local-exec.sh: an example program for Ferry's exec node provider
# (docs/providers.md). Its "machines" are `ferry agent` processes on this
# host, one directory each under $FERRY_EXEC_DIR; a program for a cloud
# would call the cloud's CLI where this one starts a process.
#
#   local-exec.sh launch|list|terminate   < request.json   > answer.json
#
#   FERRY_EXE         the ferry binary to start (default: ferry on PATH)
#   FERRY_EXEC_DIR    where machine directories go (default /tmp/ferry-exec)
#   FERRY_EXEC_GRACE  seconds from SIGTERM to SIGKILL on terminate (default 10)
#
# Needs bash, python3 (for JSON) and setsid (util-linux).
set -euo pipefail

root=${FERRY_EXEC_DIR:-/tmp/ferry-exec}
exe=${FERRY_EXE:-ferry}
grace=${FERRY_EXEC_GRACE:-10}
name_re='^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$'

die() {
	echo "local-exec: $*" >&2
	exit 1
}

# starttime PID: field 22 of /proc/PID/stat; with the pid, it names one
# process, so a pid handed out again is not taken for the agent.
starttime() {
	local stat rest f
	stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
	rest=${stat##*) } # the command name may hold spaces and ')'
	read -ra f <<<"$rest"
	[[ ${f[0]} != Z && ${f[0]} != X ]] || return 1 # a zombie has ended
	echo "${f[19]}"
}

alive() { [[ $(starttime "$1" || true) == "$2" ]]; }

# machine POOL NAME: one machine as JSON.
machine() {
	local dir=$root/$1/$2 pid start state=stopped
	read -r pid start <"$dir/pid"
	alive "$pid" "$start" && state=running
	# A machine "taken back" (touch DIR/preempted) is listed preempted.
	[[ $state == running && -e $dir/preempted ]] && state=preempted
	python3 -c '
import json, sys
pool, name, state, dir, pid = sys.argv[1:]
print(json.dumps({"id": pool + "/" + name, "pool": pool, "state": state,
                  "address": "127.0.0.1" if state in ("running", "preempted") else "",
                  "labels": {"dir": dir, "pid": pid}}))' "$1" "$2" "$state" "$dir" "$pid"
}

launch() {
	local meta pool name dir pid args=() envs=()
	# The request holds the join token: it goes to a private file, removed
	# on exit, and from there into the agent's environment only. (tmp is
	# global: the trap runs after launch has returned.)
	tmp=$(mktemp -d)
	trap 'rm -rf "$tmp"' EXIT
	meta=$(python3 -c '
import json, sys
req, out = json.load(sys.stdin), sys.argv[1]
with open(out + "/args", "wb") as f:
    for a in req.get("agent_args") or []:
        f.write(a.encode() + b"\0")
with open(out + "/env", "wb") as f:
    for k, v in (req.get("agent_env") or {}).items():
        f.write(f"{k}={v}".encode() + b"\0")
print(req.get("pool") or "", req.get("name") or "")' "$tmp")
	read -r pool name <<<"$meta"
	[[ $pool =~ $name_re ]] || die "pool ${pool@Q}: use letters, digits, '.', '_' or '-'"
	[[ $name =~ $name_re ]] || die "name ${name@Q}: use letters, digits, '.', '_' or '-'"
	dir=$root/$pool/$name
	[[ ! -e $dir/pid ]] || die "machine $pool/$name exists; terminate it first"
	mkdir -p "$dir"
	mapfile -d '' args <"$tmp/args"
	mapfile -d '' envs <"$tmp/env"
	# export is a shell builtin, so the values are never on a command line.
	# setsid: the agent outlives this script and the provider's timeout,
	# which kills the script's process group. Its output goes to a log, not
	# to the provider's pipes, which must close when this script exits.
	(
		cd "$dir"
		for kv in "${envs[@]}"; do export "$kv"; done
		exec setsid "$exe" "${args[@]}" --dir "$dir"
	) </dev/null >>"$dir/agent.log" 2>&1 &
	pid=$!
	echo "$pid $(starttime "$pid" || echo 0)" >"$dir/pid"
	machine "$pool" "$name"
}

list() {
	local pool f dir
	pool=$(python3 -c 'import json, sys; print(json.load(sys.stdin).get("pool") or "")')
	[[ -z $pool || $pool =~ $name_re ]] || die "pool ${pool@Q}: use letters, digits, '.', '_' or '-'"
	shopt -s nullglob
	for f in "$root"/${pool:-*}/*/pid; do
		dir=${f%/pid}
		machine "$(basename "$(dirname "$dir")")" "$(basename "$dir")"
	done | python3 -c '
import json, sys
print(json.dumps({"machines": [json.loads(l) for l in sys.stdin if l.strip()]}))'
}

terminate() {
	local id dir pid start i
	id=$(python3 -c 'import json, sys; print(json.load(sys.stdin).get("id") or "")')
	[[ ${id%%/*} =~ $name_re && ${id#*/} =~ $name_re && $id == */* ]] || die "id ${id@Q} is not POOL/NAME"
	dir=$root/$id
	if [[ -f $dir/pid ]]; then
		read -r pid start <"$dir/pid"
		if alive "$pid" "$start"; then
			# The agent leads its own process group: signal all of it.
			kill -TERM -- "-$pid" 2>/dev/null || true
			for ((i = 0; i < grace * 10; i++)); do
				alive "$pid" "$start" || break
				sleep 0.1
			done
			kill -KILL -- "-$pid" 2>/dev/null || true
		fi
	fi
	rm -rf "$dir" # a machine that is gone already is terminated too
	rmdir "$root/${id%%/*}" 2>/dev/null || true
	echo '{}'
}

case ${1:-} in
launch | list | terminate) "$1" ;;
*) die "usage: $0 launch|list|terminate (one JSON object on stdin)" ;;
esac
