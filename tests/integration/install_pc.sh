#!/usr/bin/env bash
# install_pc.sh - onnxq as a library others link: `cmake --install` of the
# build that made ONNXQ into a temporary prefix, then, with nothing but the
# installed files:
#   - the header compiles on its own as C11 and as C++ (extern "C");
#   - docs/examples/library.c builds with
#     `pkg-config --cflags --libs --static onnxq` (PKG_CONFIG_PATH = the
#     prefix's pkgconfig folder) and links libonnxq.a;
#   - it quantizes models/tiny_cnn.onnx with models/tiny_cnn_calib, compares
#     the result with the float model on models/tiny_cnn_test (held-out
#     crops): mean SQNR > 20 dB and min > 15 dB (quantize_cli.sh's floor:
#     random weights, 4 samples; a wrong scale or axis drives it below 10),
#     and the usage mistakes it makes come back as ONNXQ_EUSAGE, not exits;
#   - the quantized file passes `onnxq check` (the installed onnxq);
#   - the installed onnxq reports the version the library does.
# A sanitizer build (ONNXQ_SANITIZE=ON in its CMakeCache.txt) compiles the
# program with the same -fsanitize flags.
# usage: tests/integration/install_pc.sh [ONNXQ]   Closing line: "N passed, N failed, N skipped".
set -uo pipefail
. "$(dirname "$0")/lib.sh"
onnxq=${1:-$root/build/onnxq}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

build=$(cd "$(dirname "$onnxq")" && pwd)
[ -f "$build/CMakeCache.txt" ] && [ -f "$build/cmake_install.cmake" ] || die "no CMake build beside $onnxq"
prefix=$tmp/prefix
cmake --install "$build" --prefix "$prefix" >"$tmp/install.log" 2>&1 || die "cmake --install: $(tail -3 "$tmp/install.log")"
ok "cmake --install"
for f in bin/onnxq include/onnxq.h; do
	if [ -f "$prefix/$f" ]; then ok "installed $f"; else bad "installed $f"; fi
done
pc=$(find "$prefix" -name onnxq.pc | head -1)
lib=$(find "$prefix" -name libonnxq.a | head -1)
[ -n "$pc" ] && [ -n "$lib" ] || die "no libonnxq.a or onnxq.pc installed: $(cd "$prefix" && find . -type f)"
ok "installed libonnxq.a and onnxq.pc"

export PKG_CONFIG_PATH=$(dirname "$pc")
flags=$(pkg-config --cflags --libs --static onnxq 2>"$tmp/err") || die "pkg-config: $(cat "$tmp/err")"
ok "pkg-config --static onnxq"
version=$(pkg-config --modversion onnxq)
san=()
grep -q '^ONNXQ_SANITIZE:BOOL=ON' "$build/CMakeCache.txt" && san=(-fsanitize=address,undefined -fno-omit-frame-pointer)
cc=${CC:-cc}
cxx=${CXX:-c++}

# the header alone, strict C11 and C++
inc=$(pkg-config --cflags onnxq)
# shellcheck disable=SC2086 # flags are a list of words
if echo '#include <onnxq.h>' | "$cc" -std=c11 -Wall -Wextra -Wpedantic -Werror $inc -x c -fsyntax-only - 2>"$tmp/err"; then
	ok "onnxq.h compiles alone as C11"
else
	bad "onnxq.h as C11: $(head -c 400 "$tmp/err")"
fi
if command -v "$cxx" >/dev/null; then
	# shellcheck disable=SC2086
	if printf '#include <onnxq.h>\nint main() { onnxq_error e; return onnxq_options_set(nullptr, "x", nullptr, &e) ? 0 : 1; }\n' |
		"$cxx" -std=c++11 -Wall -Wextra -Wpedantic -Werror $inc -x c++ -fsyntax-only - 2>"$tmp/err"; then
		ok "onnxq.h compiles as C++"
	else
		bad "onnxq.h as C++: $(head -c 400 "$tmp/err")"
	fi
fi

# the program, linked from the installed files only
# shellcheck disable=SC2086
"$cc" -std=c11 -Wall -Wextra -Wpedantic -Werror "${san[@]}" -o "$tmp/library" "$root/docs/examples/library.c" $flags \
	2>"$tmp/err" || die "docs/examples/library.c does not build: $(head -c 600 "$tmp/err")"
ok "docs/examples/library.c builds against the installed library"
out=$tmp/q.onnx
if "$tmp/library" "$root/models/tiny_cnn.onnx" "$root/models/tiny_cnn_calib" "$root/models/tiny_cnn_test" "$out" \
	>"$tmp/out" 2>"$tmp/err"; then ok "docs/examples/library.c runs"; else
	bad "docs/examples/library.c: $(head -c 600 "$tmp/err") $(head -c 300 "$tmp/out")"
fi
get() { sed -n "s/^$1 //p" "$tmp/out"; }
min=$(get sqnr_min_db)
mean=$(get sqnr_mean_db)
echo "      tiny_cnn through the library: SQNR min ${min:-?} dB, mean ${mean:-?} dB ($(get samples) samples)"
if [ -n "$mean" ] && awk -v m="$mean" -v n="$min" 'BEGIN { exit !(m > 20 && n > 15) }'; then
	ok "SQNR mean > 20 dB, min > 15 dB"
else
	bad "SQNR mean > 20 dB, min > 15 dB (got min ${min:-none}, mean ${mean:-none})"
fi
if [ "$(get outputs)" = 1 ] && [ "$(get samples)" = "$(find "$root/models/tiny_cnn_test" -name '*.npy' | wc -l)" ]; then
	ok "compared 1 output on every held-out sample"
else
	bad "outputs/samples: $(cat "$tmp/out")"
fi
if [ "$(grep -c '^usage: ' "$tmp/out")" = 4 ]; then ok "mistakes come back as ONNXQ_EUSAGE"; else
	bad "usage errors: $(grep '^usage' "$tmp/out") $(head -c 300 "$tmp/err")"
fi
if grep -q '^usage: weight-only with calib: quantize: --weight-only needs no --calib' "$tmp/out"; then
	ok "the library checks how options fit together"
else
	bad "option rules: $(grep '^usage' "$tmp/out")"
fi
if "$prefix/bin/onnxq" check "$out" >"$tmp/check" 2>&1; then ok "onnxq check accepts the output"; else
	bad "onnxq check: $(head -c 300 "$tmp/check")"
fi
if [ "$("$prefix/bin/onnxq" --version)" = "onnxq $version" ] && [ "$(get version)" = "$version" ]; then
	ok "version $version everywhere"
else
	bad "versions: pc $version, onnxq $("$prefix/bin/onnxq" --version), library $(get version)"
fi
finish
