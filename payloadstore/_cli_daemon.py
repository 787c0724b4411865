"""The commands that run things: `daemon` (a function for each job of queues) and `dev` (the
control plane, locally)."""

from __future__ import annotations

import importlib
import logging
import os
import sys
from typing import Any

import click

from ._cli_output import fail
from ._cli_root import Seconds, Settings, cli
from .errors import ConfigError, PayloadStoreError


@cli.command(context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
@click.pass_context
def dev(ctx: click.Context) -> None:
    """Run the control plane locally (redis-server, S3 emulator, gateway); options pass through."""
    import importlib.util

    needed = (
        "payloadstore_devstack",
        "payloadstore_controlplane",
        "pydantic",
        "redis",
        "boto3",
        "aws_lambda_powertools",
        "moto",
    )
    missing = [name for name in needed if importlib.util.find_spec(name) is None]
    if missing:
        fail(
            ConfigError(
                "payloadstore dev needs the local stack's packages: "
                f"pip install 'payloadstore[stack]', or run make dev in a checkout "
                f"(missing: {', '.join(missing)})"
            )
        )
    from payloadstore_devstack.stack import main as stack_main

    sys.exit(stack_main(list(ctx.args)))


def load_function(spec: str):
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise click.BadParameter("use MODULE:FUNCTION, e.g. tasks:resize", param_hint="MODULE:FUNC")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        target: Any = importlib.import_module(module_name)
    except ImportError as e:
        raise click.BadParameter(
            f"cannot import {module_name}: {e}", param_hint="MODULE:FUNC"
        ) from e
    for part in attr.split("."):
        target = getattr(target, part, None)
        if target is None:
            raise click.BadParameter(f"{module_name} has no {attr}", param_hint="MODULE:FUNC")
    if not callable(target):
        raise click.BadParameter(f"{spec} is not callable", param_hint="MODULE:FUNC")
    return target


@cli.command()
@click.argument("function")
@click.option(
    "--queue",
    "-q",
    "queues",
    multiple=True,
    required=True,
    help="queue to take jobs from (repeatable)",
)
@click.option("--concurrency", "-c", type=click.IntRange(min=1), default=1, show_default=True)
@click.option(
    "--poll-wait",
    type=Seconds(0.0, finite=True),
    default=10.0,
    show_default=True,
    help="long-poll seconds",
)
@click.option(
    "--max-jobs", type=click.IntRange(min=1), default=None, help="stop after this many jobs"
)
@click.option("--exit-when-idle", is_flag=True, help="stop at the first empty poll")
@click.pass_obj
def daemon(
    settings: Settings, function, queues, concurrency, poll_wait, max_jobs, exit_when_idle
) -> None:
    """Run FUNCTION (module:function) for each job of the queues, until SIGTERM/SIGINT."""
    from .daemon import Daemon

    fn = load_function(function)
    if not settings.verbose:
        logging.getLogger("payloadstore").setLevel(logging.INFO)
    try:
        with settings.client("daemon", progress=False) as client:
            worker = Daemon(client, list(queues), concurrency=concurrency, wait_s=poll_wait)
            stats = worker.run(fn, max_jobs=max_jobs, stop_when_idle=exit_when_idle)
    except PayloadStoreError as e:
        fail(e, settings.verbose)
    click.echo(" ".join(f"{k}={v}" for k, v in sorted(stats.items())) or "no jobs", err=True)
