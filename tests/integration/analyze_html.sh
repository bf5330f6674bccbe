#!/usr/bin/env bash
# analyze_html.sh - `onnxq analyze --html` opened in a headless browser: Chromium
# (Debian `chromium`, --headless --dump-dom, no network) loads the page and
# analyze_html.py checks the DOM it built against the same run's --json: the
# outputs table, the ranked points table, the error plot along the graph (one
# mark per point, at its SQNR on the plot's own axis, in graph order), the
# fallback "share" column, and no external resources. The model is the bundled
# tiny CNN with --prefer accuracy (the default placement leaves it float).
# usage: tests/integration/analyze_html.sh [ONNXQ]   Closing line: "N passed, N failed, N skipped".
set -uo pipefail
. "$(dirname "$0")/lib.sh"
onnxq=${1:-$root/build/onnxq}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

chrome=$(command -v chromium || command -v chromium-browser || true)
if [ -z "$chrome" ]; then
	skip "analyze --html: no chromium (apt-get install chromium)"
	finish
	exit
fi
if "$onnxq" analyze "$root/models/tiny_cnn.onnx" --calib "$root/models/tiny_cnn_calib" --prefer accuracy \
	--html "$tmp/a.html" --json "$tmp/a.json" >"$tmp/log" 2>&1; then
	ok "analyze --html --json"
else
	bad "analyze: $(tail -1 "$tmp/log")"
	finish
	exit
fi
# A fresh profile; every host name resolves to nothing, so a page that
# fetched anything would show it missing.
if timeout 120 "$chrome" --headless --no-sandbox --disable-gpu --no-first-run \
	--user-data-dir="$tmp/profile" --host-resolver-rules="MAP * ~NOTFOUND" \
	--dump-dom "file://$tmp/a.html" >"$tmp/dom.html" 2>"$tmp/chrome.err" && [ -s "$tmp/dom.html" ]; then
	ok "chromium --headless --dump-dom"
else
	bad "chromium: $(grep -v dbus "$tmp/chrome.err" | tail -2)"
	finish
	exit
fi
while read -r line; do
	case $line in
	"ok    "*) ok "${line#ok    }" ;;
	*) bad "${line#FAIL  }" ;;
	esac
done < <(/usr/bin/python3 "$here/analyze_html.py" "$tmp/dom.html" "$tmp/a.json" 2>&1)
finish
