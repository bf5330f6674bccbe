# lib.sh - what the integration scripts share. Sourced, not run:
#
#     . "$(dirname "$0")/lib.sh"
#
# Sets `here` (this folder) and `root` (the repository). Every check of a
# script ends in ok, bad or skip, and the script ends with `finish`, whose
# closing line "N passed, N failed, N skipped" is what tests/run_all.sh adds
# up; its return status is the script's exit status (what ctest judges).
#
#   ok [MSG]       a check passed: "ok    MSG" (nothing without MSG)
#   bad MSG        a check failed: "FAIL  MSG"
#   skip MSG [N]   N checks (default 1) cannot run here: "SKIP  MSG"
#   tally LINE     adds a tool's "N passed, N failed[, N skipped]" line to the
#                  counts; returns 1, adding nothing, when LINE is not one
#   die MSG        the script cannot run at all: MSG on stderr, then the
#                  closing line "0 passed, 1 failed" and exit 1
#   finish         prints the closing line; returns 1 when a check failed
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
oq_pass=0
oq_fail=0
oq_skip=0

ok() {
	oq_pass=$((oq_pass + 1))
	[ $# -eq 0 ] || echo "ok    $*"
}

bad() {
	oq_fail=$((oq_fail + 1))
	echo "FAIL  $*"
}

skip() {
	oq_skip=$((oq_skip + ${2:-1}))
	echo "SKIP  $1"
}

tally() {
	[[ $1 =~ ^([0-9]+)\ passed,\ ([0-9]+)\ failed(,\ ([0-9]+)\ skipped)?$ ]] || return 1
	oq_pass=$((oq_pass + BASH_REMATCH[1]))
	oq_fail=$((oq_fail + BASH_REMATCH[2]))
	oq_skip=$((oq_skip + ${BASH_REMATCH[4]:-0}))
}

die() {
	echo "$(basename "$0" .sh): $*" >&2
	echo "0 passed, 1 failed"
	exit 1
}

finish() {
	echo "$oq_pass passed, $oq_fail failed, $oq_skip skipped"
	[ "$oq_fail" -eq 0 ]
}
