#!/usr/bin/env bash
# Joins two Speech Commands corpora made by `hush-host corpus synth` (different seeds, so
# different speakers) into a third, with hard links: every class folder's clips, both
# speakers.tsv files and both _unknown_/words.tsv files; the first corpus's background
# noises. Used for corpus12 + SVOX Pico speakers (README, "A fourth engine").
#   join_corpora.sh FIRST SECOND OUT
set -euo pipefail
[ $# -eq 3 ] || { echo "usage: $0 FIRST SECOND OUT" >&2; exit 2; }
first=$1 second=$2 out=$3
for c in "$first" "$second"; do
  [ -f "$c/speakers.tsv" ] || { echo "$c: no speakers.tsv (not a corpus synth corpus)" >&2; exit 1; }
done
[ ! -e "$out" ] || { echo "$out exists; choose a new OUT" >&2; exit 1; }
dups=$(cat <(tail -n +2 "$first/speakers.tsv") <(tail -n +2 "$second/speakers.tsv") | cut -f1 | sort | uniq -d)
[ -z "$dups" ] || { echo "speakers in both corpora: $dups" >&2; exit 1; }
cp -al "$first" "$out.partial"
for dir in "$second"/*/; do
  name=$(basename "$dir")
  [ "$name" = _background_noise_ ] && continue
  mkdir -p "$out.partial/$name"
  find "$dir" -maxdepth 1 \( -name '*.wav' -o -name '*.flac' \) -exec ln -t "$out.partial/$name" {} +
done
rm "$out.partial/speakers.tsv" "$out.partial/_unknown_/words.tsv"
{ cat "$first/speakers.tsv"; tail -n +2 "$second/speakers.tsv"; } > "$out.partial/speakers.tsv"
{ head -n 1 "$first/_unknown_/words.tsv"
  { tail -n +2 "$first/_unknown_/words.tsv"; tail -n +2 "$second/_unknown_/words.tsv"; } | sort
} > "$out.partial/_unknown_/words.tsv"
mv "$out.partial" "$out"
echo "$out: $(find "$out" -name '*.wav' -o -name '*.flac' | wc -l) files, $(( $(wc -l < "$out/speakers.tsv") - 1 )) speakers"
