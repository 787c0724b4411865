"""The commands that watch the stack and its queues: `health`, `queues` (their figures), `top`
(a refreshing view) and `dashboard` (a web page of queues and jobs)."""

from __future__ import annotations

import json
import sys

import click

from ._cli_output import fail
from ._cli_root import Seconds, Settings, cli
from ._client_core import DEFAULT_NAMESPACE
from .client import Client
from .errors import ConfigError, PayloadStoreError


@cli.command()
@click.pass_obj
def health(settings: Settings) -> None:
    """Check the control plane's Redis and bucket; exit 7 when a check fails."""
    try:
        endpoint = settings.endpoint_only()
        with Client(endpoint, "-", settings.namespace or DEFAULT_NAMESPACE) as client:
            healthy, body = client.health()
    except PayloadStoreError as e:
        fail(e, settings.verbose)
    for name, check in sorted((body.get("checks") or {}).items()):
        ok = check.get("ok") if isinstance(check, dict) else bool(check)
        detail = check.get("detail", "") if isinstance(check, dict) else str(check)
        click.echo(f"{'ok  ' if ok else 'FAIL'} {name}: {detail}")
    click.echo(f"status: {body.get('status')}")
    sys.exit(0 if healthy else 7)


@cli.command()
@click.argument("queue", required=False)
@click.option("--json", "as_json", is_flag=True, help="print the figures as JSON")
@click.pass_obj
def queues(settings: Settings, queue: str | None, as_json: bool) -> None:
    """Queued, in flight and oldest queued age of every queue (or of QUEUE); 4 if unknown."""
    from dataclasses import asdict

    from ._top import queue_table

    try:
        with settings.client() as client:
            found = [client.queue(queue).stats()] if queue else client.queues()
    except PayloadStoreError as e:
        fail(e, settings.verbose)
    rows = [asdict(q) for q in found]
    click.echo(json.dumps({"queues": rows}) if as_json else queue_table(rows))


@cli.command()
@click.option(
    "--interval",
    type=Seconds(0.1, finite=True),
    default=2.0,
    show_default=True,
    help="seconds between refreshes",
)
@click.pass_obj
def top(settings: Settings, interval: float) -> None:
    """A refreshing view of every queue: depth, in flight, oldest age, depth trend. Ctrl-C quits."""
    from dataclasses import asdict

    from ._top import run_top

    try:
        with settings.client() as client:
            run_top(
                lambda: [asdict(q) for q in client.queues()],
                title=f"payloadstore top: namespace {client.namespace} at {client.wire.endpoint}",
                interval_s=interval,
            )
    except PayloadStoreError as e:
        fail(e, settings.verbose)


@cli.command()
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=8765,
    show_default=True,
    help="port to serve on (0: any free port)",
)
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="address to serve on: anyone who reaches it acts with this process's token",
)
@click.option(
    "--refresh",
    type=Seconds(0.5, finite=True),
    default=3.0,
    show_default=True,
    help="seconds between the page's refreshes",
)
@click.pass_obj
def dashboard(settings: Settings, port: int, host: str, refresh: float) -> None:
    """Serve a web page of the namespace's queues and jobs (retry, cancel, redrive, purge) on
    http://127.0.0.1:PORT/. The token stays in this process; Ctrl-C stops it."""
    from .dashboard import ClientBackend, Dashboard

    try:
        client = settings.client("client", progress=False)
    except PayloadStoreError as e:
        fail(e, settings.verbose)
    try:
        server = Dashboard(
            ClientBackend(client),
            host,
            port,
            secrets_to_hide=ClientBackend.secrets(client),
            refresh_s=refresh,
        )
    except (ValueError, OSError) as e:
        client.close()
        fail(ConfigError(f"cannot serve the dashboard on {host}:{port}: {e}"))
    if not ipaddress_is_loopback(host):
        click.echo(
            f"warning: serving on {host}: anyone who reaches it acts with this token", err=True
        )
    click.echo(
        f"dashboard url={server.url} namespace={client.namespace} "
        f"endpoint={client.wire.endpoint} (Ctrl-C to stop)",
        err=True,
    )
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.close()
        client.close()


def ipaddress_is_loopback(host: str) -> bool:
    import ipaddress

    return ipaddress.ip_address(host).is_loopback
