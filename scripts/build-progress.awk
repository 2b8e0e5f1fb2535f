# build-progress.awk turns the output of a long image build (debootstrap,
# docker build with apt-get, in either builder's format) into a few lines
# of progress on stdout: each phase once, and running counts of packages,
# so that a build of minutes is not silent. The full output goes to a log
# file beside it (tee), which the scripts show when the build fails.
#
#   ... | awk -v who=make-node-image -f scripts/build-progress.awk
function say(msg) { printf "%s: %s\n", who, msg; fflush() }
function every(n, what) { if (n % 50 == 0) say(what " " n " packages") }
BEGIN { past["Retrieving"] = "retrieved"; past["Extracting"] = "extracted"; past["Unpacking"] = "unpacked"; past["Configuring"] = "configured" }
{ sub(/\r$/, "") }
# docker build: the legacy builder's "Step 2/3 : RUN ..." and BuildKit's
# "#6 [2/3] RUN ...".
/^Step [0-9]+\/[0-9]+ : / { say(substr($0, 1, 160)); next }
/^#[0-9]+ \[[^]]*[0-9]+\/[0-9]+\] / { line = $0; sub(/^#[0-9]+ /, "", line); if (!(line in seen)) { seen[line] = 1; say(substr(line, 1, 160)) }; next }
# debootstrap: its phases ("I: Retrieving Packages", "I: Unpacking
# required packages...") each once, and of its lines per package
# ("I: Retrieving libc6 2.36-9", "I: Extracting libc6...") a running count.
/^I: / {
    if ($0 ~ /[Pp]ackages|Release|successfully|[Rr]esolving/) { say("debootstrap: " substr($0, 4, 100)); next }
    verb = $2
    count[verb]++
    if (verb in past && count[verb] % 25 == 0) say("debootstrap: " past[verb] " " count[verb] " packages")
    next
}
# apt-get inside the build.
/newly installed/ { t = $0; sub(/^#[0-9]+ [0-9.]+ /, "", t); say("apt: " t); next }
/Need to get / { t = $0; sub(/^.*Need to get /, "", t); say("apt: downloading " t); next }
/Get:[0-9]+ / { got++; every(got, "apt: downloaded"); next }
/Fetched / { t = $0; sub(/^.*Fetched /, "", t); say("apt: fetched " t); next }
/Unpacking / { unpacked++; every(unpacked, "apt: unpacked"); next }
/Setting up / { setup++; every(setup, "apt: set up"); next }
/Successfully built|exporting layers|writing image/ { t = $0; sub(/^#[0-9]+ ([0-9.]+ )?/, "", t); say("docker: " t) }
END {
    if (unpacked + setup > 0) say("apt: unpacked " unpacked ", set up " setup " packages")
    if ("Configuring" in count) say("debootstrap: retrieved " count["Retrieving"] ", extracted " count["Extracting"] ", configured " count["Configuring"] " packages")
}
