"""The commands that change jobs: `cancel`, `retry` (one job), `redrive` (a queue's failed
jobs) and `purge` (a queue's queued jobs)."""

from __future__ import annotations

import click

from ._cli_output import fail
from ._cli_root import Settings, cli
from ._client_core import DEFAULT_NAMESPACE
from .errors import PayloadStoreError


@cli.command()
@click.argument("job_id")
@click.pass_obj
def cancel(settings: Settings, job_id) -> None:
    """Cancel a job: a queued one ends cancelled and never runs; a running one is asked to stop
    (its daemon learns it from its next heartbeat). Prints the state; a finished job exits 1."""
    try:
        with settings.client("client") as client:
            answer = client.job(job_id).cancel()
            if answer.cancel_requested:
                click.echo(f"{job_id} running: cancel requested")
            else:
                click.echo(f"{job_id} {answer.state}")
    except PayloadStoreError as e:
        fail(e, settings.verbose)


REDRIVE_STATES = ("failed", "payload_lost", "payload_corrupt", "cancelled")


@cli.command()
@click.argument("job_id")
@click.pass_obj
def retry(settings: Settings, job_id) -> None:
    """Queue a failed or cancelled job again, with the same id. A job that succeeded, is queued
    or running, or whose arguments are past the retention exits 1 saying why."""
    try:
        with settings.client() as client:
            answer = client.job(job_id).retry()
    except PayloadStoreError as e:
        fail(e, settings.verbose)
    click.echo(f"{answer.job_id} {answer.state} (next attempt {answer.attempt})")


@cli.command()
@click.argument("queue")
@click.option(
    "--state",
    "states",
    type=click.Choice(REDRIVE_STATES),
    multiple=True,
    help="retry jobs in this state (repeatable; default: failed, payload_lost, payload_corrupt)",
)
@click.option("--limit", type=click.IntRange(1, 1000), default=None, help="at most this many [100]")
@click.pass_obj
def redrive(settings: Settings, queue, states, limit) -> None:
    """Retry the queue's failed jobs (newest first), e.g. once the bug that failed them is
    fixed. Prints how many were retried and skipped (arguments past the retention)."""
    try:
        with settings.client() as client:
            answer = client.queue(queue).redrive(states=states or None, limit=limit)
    except PayloadStoreError as e:
        fail(e, settings.verbose)
    click.echo(f"{queue}: retried {answer.retried}, skipped {answer.skipped}")


@cli.command()
@click.argument("queue")
@click.option("--yes", "-y", is_flag=True, help="do not ask for confirmation")
@click.pass_obj
def purge(settings: Settings, queue, yes) -> None:
    """Cancel every queued job of QUEUE (running jobs go on). Asks first unless --yes."""
    if not yes:
        click.confirm(
            f"cancel every queued job of queue {queue} in namespace "
            f"{settings.namespace or DEFAULT_NAMESPACE}?",
            abort=True,
            err=True,
        )
    try:
        with settings.client() as client:
            answer = client.queue(queue).purge()
    except PayloadStoreError as e:
        fail(e, settings.verbose)
    click.echo(f"{queue}: cancelled {answer.cancelled}, {answer.remaining} still queued")
