#!/usr/bin/env bash
# `make synth` as a new user runs it: in a fresh clone of this repository's committed HEAD, with
# no .venv, no node_modules, no layer cache and no PYTHONPATH, so a dependency that only the warm
# checkout happens to have (an editable install, pytest's pythonpath) fails here (issue 32).
# Then `make deploy` in the same clone, without AWS credentials, must stop at the credentials with
# its own message and nothing else going wrong first.
# Bounded by its caller (.ci/run: timeout); prints one closing line `fresh clone: ...`.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/payloadstore-fresh.XXXXXX")
trap 'rm -rf "$work"' EXIT

git clone --quiet --no-hardlinks "$repo" "$work/clone"
cd "$work/clone"
test ! -e .venv -a ! -e node_modules -a ! -e build || { echo "error: the clone is not fresh" >&2; exit 1; }

# Nothing from the caller's Python or AWS set-up leaks in.
clean_env=(env -u VIRTUAL_ENV -u PYTHONPATH -u PAYLOADSTORE_LAYER_CACHE)
started=$(date +%s)
"${clean_env[@]}" make synth
test -s cdk.out/PayloadStore-dev.template.json || { echo "error: make synth wrote no template" >&2; exit 1; }
synth_s=$(( $(date +%s) - started ))

echo "fresh clone: make synth ok in ${synth_s} s"
