#!/usr/bin/env bash
# The whole onnxq test suite: build, Criterion unit tests (ctest -L unit),
# then every integration script tests/integration/*.sh (sorted; fetch.sh and
# lib.sh are their helpers, not tests), each given the onnxq binary as $1.
#
#   tests/run_all.sh              normal pass (build dir $OQ_BUILD_DIR, default build/)
#   tests/run_all.sh --sanitize   the same pass built with -DONNXQ_SANITIZE=ON
#                                 (ASan + UBSan) in $OQ_ASAN_BUILD_DIR (default build-asan/)
#   tests/run_all.sh --both       normal pass, then the sanitizer pass (or OQ_SANITIZE=1)
#   tests/run_all.sh --install    first install the build and test packages (.ci/setup,
#                                 Debian, as root; skipped with a note otherwise)
#
# Counting: each ctest test (one Criterion executable) is one test; each
# integration script contributes the counts of its closing
# "N passed, N failed[, N skipped]" line. A script that exits non-zero
# without reporting a failure, or prints no such line, counts as one failure;
# so does a build that breaks. Prints per-step timings and a final
# "N passed, N failed[, N skipped]" line; exit 1 when anything failed.
#
# Environment: OQ_CMAKE_ARGS (extra cmake arguments for both passes),
# OQ_JOBS (parallel build/ctest jobs, default nproc), OQ_ONLY (a regex: run
# only the integration scripts whose file name matches).
# Sanitizer runs use ASAN_OPTIONS=detect_leaks=1 (LeakSanitizer works in this
# environment; override ASAN_OPTIONS to change it) and make UBSan fatal.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
jobs=${OQ_JOBS:-$(nproc 2>/dev/null || echo 2)}
mode=normal
install=0
[ "${OQ_SANITIZE:-0}" = 1 ] && mode=both
for a in "$@"; do
	case $a in
	--sanitize | --asan) mode=sanitize ;;
	--both) mode=both ;;
	--install) install=1 ;;
	-h | --help)
		sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//'
		exit 0
		;;
	*)
		echo "run_all: unknown argument '$a' (see --help)" >&2
		exit 2
		;;
	esac
done

total_pass=0
total_fail=0
total_skip=0
summary=()

now() { date +%s; }

# Adds one result row and the counts.
note() { # label passed failed skipped seconds
	total_pass=$((total_pass + $2))
	total_fail=$((total_fail + $3))
	total_skip=$((total_skip + $4))
	summary+=("$(printf '%-34s %6d passed %4d failed %4d skipped %5ds' "$1" "$2" "$3" "$4" "$5")")
}

# One full pass: configure, build, ctest, integration scripts.
pass() { # label build_dir cmake_args...
	local label=$1 build=$2 t0 log rc p f s line
	shift 2
	echo "=== [$label] configure + build in $build"
	t0=$(now)
	# shellcheck disable=SC2086 # OQ_CMAKE_ARGS is a list of words on purpose
	if ! cmake -S "$root" -B "$build" "$@" ${OQ_CMAKE_ARGS:-} >/dev/null ||
		! cmake --build "$build" -j "$jobs"; then
		echo "run_all: [$label] build failed" >&2
		note "[$label] build" 0 1 0 $(($(now) - t0))
		return
	fi
	note "[$label] build" 1 0 0 $(($(now) - t0))

	echo "=== [$label] unit tests (ctest -L unit)"
	t0=$(now)
	log=$(mktemp)
	# The scripts below are registered with ctest too (labels integration and
	# conformance); run here, they are counted by their closing lines.
	ctest --test-dir "$build" -L unit --output-on-failure -j "$jobs" 2>&1 | tee "$log"
	rc=${PIPESTATUS[0]}
	line=$(grep -E '[0-9]+% tests passed, [0-9]+ tests? failed out of [0-9]+' "$log" | tail -n1)
	if [ -n "$line" ]; then
		f=$(sed -E 's/.* ([0-9]+) tests? failed out of ([0-9]+).*/\1/' <<<"$line")
		p=$(($(sed -E 's/.* out of ([0-9]+).*/\1/' <<<"$line") - f))
	elif grep -q 'No tests were found' "$log"; then
		p=0
		f=0
	else
		p=0
		f=1
	fi
	[ "$rc" -ne 0 ] && [ "$f" -eq 0 ] && f=1
	note "[$label] unit (ctest)" "$p" "$f" 0 $(($(now) - t0))
	rm -f "$log"

	for script in "$root"/tests/integration/*.sh; do
		local name
		name=$(basename "$script")
		case $name in fetch.sh | lib.sh) continue ;; esac
		if [ -n "${OQ_ONLY:-}" ] && ! [[ $name =~ $OQ_ONLY ]]; then
			continue
		fi
		echo "=== [$label] $name"
		t0=$(now)
		log=$(mktemp)
		bash "$script" "$build/onnxq" </dev/null 2>&1 | tee "$log"
		rc=${PIPESTATUS[0]}
		# The closing line; a "label: " prefix is tolerated.
		line=$(grep -oE '(^|: )[0-9]+ passed, [0-9]+ failed(, [0-9]+ skipped)?$' "$log" | tail -n1)
		line=${line#: }
		rm -f "$log"
		if [ -z "$line" ]; then
			echo "run_all: [$label] $name printed no 'N passed, N failed' line (exit $rc)" >&2
			note "[$label] $name" 0 1 0 $(($(now) - t0))
			continue
		fi
		read -r p _ f _ s _ <<<"${line//,/}"
		s=${s:-0}
		if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
			echo "run_all: [$label] $name exited $rc without reporting a failure" >&2
			f=1
		fi
		note "[$label] $name" "$p" "$f" "$s" $(($(now) - t0))
	done
}

start=$(now)
if [ "$install" = 1 ]; then
	t0=$(now)
	if [ "$(id -u)" -ne 0 ]; then
		echo "run_all: not root: skipping package installation (run .ci/setup as root once)" >&2
	elif bash "$root/.ci/setup"; then
		note "install (.ci/setup)" 1 0 0 $(($(now) - t0))
	else
		echo "run_all: .ci/setup failed" >&2
		note "install (.ci/setup)" 0 1 0 $(($(now) - t0))
	fi
fi
# Fill the download cache once, before the first pass, so its time is a row
# of its own rather than part of the first script that needs it.
t0=$(now)
if "$root/tests/integration/fetch.sh" >/dev/null &&
	{ ! /usr/bin/python3 -c 'import torch, torchvision' 2>/dev/null ||
		/usr/bin/python3 "$root/tests/integration/torchvision_export.py" "${OQ_CACHE:-$root/.cache}/tv" \
			resnet18 resnet50 mobilenet_v2 mobilenet_v3_small efficientnet_b0 squeezenet1_1 vit_b_16 >/dev/null; }; then
	note "prefetch (.cache)" 1 0 0 $(($(now) - t0))
else
	echo "run_all: fetching test models failed" >&2
	note "prefetch (.cache)" 0 1 0 $(($(now) - t0))
fi
case $mode in
normal) pass normal "${OQ_BUILD_DIR:-$root/build}" ;;
sanitize | both)
	[ $mode = both ] && pass normal "${OQ_BUILD_DIR:-$root/build}"
	export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
	export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
	pass asan+ubsan "${OQ_ASAN_BUILD_DIR:-$root/build-asan}" -DONNXQ_SANITIZE=ON
	;;
esac

echo
echo "=== summary ($(($(now) - start))s)"
printf '%s\n' "${summary[@]}"
if [ "$total_skip" -gt 0 ]; then
	echo "$total_pass passed, $total_fail failed, $total_skip skipped"
else
	echo "$total_pass passed, $total_fail failed"
fi
[ "$total_fail" -eq 0 ]
