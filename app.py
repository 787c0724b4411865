#!/usr/bin/env python3
"""CDK entry point: `npx cdk synth` / `npx cdk deploy` run this with the project's venv (cdk.json)."""

import sys

try:
    from infra.app_factory import build_app
except ModuleNotFoundError as missing:  # `make dev` installs [stack] only: no CDK in the venv
    if missing.name not in ("aws_cdk", "constructs", "cdk_nag", "jsii", "pydantic"):
        raise
    sys.exit(
        f"error: no module named {missing.name!r} ({sys.executable}): run `make synth` or "
        "`make deploy` once, which installs payloadstore[infra] into .venv; `npx cdk ...` "
        "works after it"
    )

app, _stack = build_app()
app.synth()
