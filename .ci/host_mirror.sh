#!/usr/bin/env bash
# Prints the first URI that this host's apt sources use for SUITE (e.g.
# bookworm), read from one-line (.list) and deb822 (.sources) files alike.
# Exits 1 when none does.
set -euo pipefail
suite=${1:?usage: host_mirror.sh SUITE}
files=()
for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
  [ -f "$f" ] && files+=("$f")
done
[ ${#files[@]} -gt 0 ] || exit 1
awk -v suite="$suite" '
  function has(list, s,   n, a, i) { n = split(list, a, /[ \t]+/); for (i = 1; i <= n; i++) if (a[i] == s) return 1; return 0 }
  function flush() { if (types ~ /(^|[ \t])deb([ \t]|$)/ && enabled != "no" && has(suites, suite)) { split(uris, u, /[ \t]+/); print u[1]; found = 1; exit } types = uris = suites = ""; enabled = "" }
  FNR == 1 { flush(); deb822 = (FILENAME ~ /\.sources$/) }
  /^[ \t]*#/ { next }
  deb822 && /^[ \t]*$/ { flush(); next }
  deb822 { key = tolower($1); sub(/:$/, "", key); val = $0; sub(/^[^:]*:[ \t]*/, "", val)
           if (key == "types") types = val; else if (key == "uris") uris = val
           else if (key == "suites") suites = val; else if (key == "enabled") enabled = tolower(val); next }
  $1 == "deb" { i = 2; if ($i ~ /^\[/) { while ($i !~ /\]$/) i++; i++ } if ($(i + 1) == suite) { print $i; found = 1; exit } }
  END { if (!found) flush(); if (!found) exit 1 }
' "${files[@]}"
