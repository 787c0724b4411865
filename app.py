#!/usr/bin/env python3
"""CDK entry point: `npx cdk synth` / `npx cdk deploy` run this with the project's venv (cdk.json)."""

from infra.app_factory import build_app

app, _stack = build_app()
app.synth()
