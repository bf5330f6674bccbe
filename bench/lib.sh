# lib.sh - shell helpers shared by the bench scripts (sourced, not run).

# rep_dir SRC REP DST: DST (made afresh) holds REP cycles of SRC's sample files as symlinks
# named 00000.npy, 00001.npy, ... in cycle order; prints the number of links.
rep_dir() {
	local src=$1 rep=$2 dst=$3 i=0 r f
	rm -rf "$dst"
	mkdir "$dst"
	for r in $(seq "$rep"); do
		for f in $(ls "$src"); do
			ln -s "$src/$f" "$dst/$(printf '%05d' $i)${f#"${f%%.*}"}"
			i=$((i + 1))
		done
	done
	echo "$i"
}
