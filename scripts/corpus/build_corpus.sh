#!/usr/bin/env bash
# Builds the training corpus from real text shipped in Debian packages:
#   prose  - King James Bible (bible-kjv), fortunes (fortunes, fortunes-min)
#   dict   - GCIDE dictionary entries (dict-gcide, markup stripped)
#   code   - Python: the 3.11 standard library, Django, NetworkX
# Output ($1, default build/corpus): train.txt, heldout.txt (~5%, by document),
# stats.txt. Documents start with a "<|doc|> SOURCE TITLE" line (see extract.py).
#   bash scripts/corpus/build_corpus.sh [OUTDIR]
# Idempotent: packages are fetched once; outputs are rewritten deterministically.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${1:-$here/../../build/corpus}"
pyver="${PYVER:-3.11}"   # Debian 12's python3
mkdir -p "$out"
out="$(cd "$out" && pwd)"
pkgdir="$out/.pkgs"

sudo=""
[ "$(id -u)" -ne 0 ] && sudo="sudo"
apt_updated=0
apt_update_once() {
  if [ "$apt_updated" -eq 0 ]; then $sudo apt-get update -qq; apt_updated=1; fi
}

# bible-kjv is a program (its text is in a compressed, indexed format), so it
# is installed; python3 runs extract.py.
need=()
for p in bible-kjv python3; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
  apt_update_once
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${need[@]}"
fi

# Pure-data packages are unpacked, not installed: no dictd daemon, no change to
# the system Python, and the file set does not depend on what else is installed.
data_pkgs=(fortunes fortunes-min dict-gcide "libpython$pyver-minimal" "libpython$pyver-stdlib"
           python3-django python3-networkx)
mkdir -p "$pkgdir"
for p in "${data_pkgs[@]}"; do
  [ -f "$pkgdir/$p/.unpacked" ] && continue
  rm -rf "${pkgdir:?}/$p" "${pkgdir:?}/dl-$p" && mkdir -p "$pkgdir/dl-$p"
  # apt-get download wants a list; the _apt sandbox cannot write root-owned dirs
  (cd "$pkgdir/dl-$p" && chmod 777 . && { apt-get download -qq "$p" 2>/dev/null ||
     { apt_update_once; apt-get download -qq "$p"; }; })
  deb=$(ls "$pkgdir/dl-$p"/*.deb)
  dpkg-deb -x "$deb" "$pkgdir/$p"
  # shellcheck disable=SC2016  # ${...} is dpkg's format, not the shell's
  dpkg-deb --showformat='${Package} ${Version}\n' -W "$deb" > "$pkgdir/$p/.unpacked"
  rm -rf "$pkgdir/dl-$p"
done

bible -l 100000 Gen1:1-Rev22:21 </dev/null > "$pkgdir/kjv.txt"
python3 "$here/extract.py" --pkgs "$pkgdir" --kjv "$pkgdir/kjv.txt" --pyver "$pyver" --out "$out"

{ echo; echo "packages:"
  dpkg-query -W -f='${Package} ${Version}\n' bible-kjv bible-kjv-text
  cat "$pkgdir"/*/.unpacked; } >> "$out/stats.txt"
cat "$out/stats.txt"
