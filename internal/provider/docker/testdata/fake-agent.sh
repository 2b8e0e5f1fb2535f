#!/bin/sh
# fake-agent.sh stands in for the ferry binary in a node, mounted at
# /usr/local/bin/ferry: it writes its arguments and environment to
# /out/HOSTNAME.args and .env, fetches SERVER/ping (SERVER from --server)
# into /out/HOSTNAME.reach to show that the URL reaches the host, and
# sleeps until it is stopped.
out=/out/$(hostname)
server=
prev=
for a in "$@"; do
  [ "$prev" = --server ] && server=$a
  prev=$a
done
env >"$out.env.tmp" && mv "$out.env.tmp" "$out.env"
printf '%s\n' "$@" >"$out.args.tmp" && mv "$out.args.tmp" "$out.args"
python3 -c 'import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1] + "/ping", timeout=20).read().decode())' \
  "$server" >"$out.reach.tmp" 2>&1
mv "$out.reach.tmp" "$out.reach"
exec sleep 3600
