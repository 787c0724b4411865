"""The job commands of the command line: `enqueue` (one job, or one per JSON line), `blob put`,
`result`, `status` (with what a job carried) and `jobs` (a queue's jobs in one state)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from ._cli_output import dumps_json, emit_value, fail, refuse_value
from ._cli_root import OUT_PATH, SECONDS, Settings, cli
from .client import Client
from .codec import CodecError
from .errors import PayloadStoreError


@cli.command()
@click.argument("queue")
@click.option(
    "--file",
    "file_path",
    type=click.Path(exists=True, dir_okay=False, allow_dash=True),
    help="pass this file's bytes as the one argument ('-' for stdin)",
)
@click.option("--json", "json_text", help="pass this JSON value as the one argument")
@click.option(
    "--jsonl",
    "jsonl_path",
    type=click.Path(exists=True, dir_okay=False, allow_dash=True),
    help="one job per line of this JSON Lines file ('-' for stdin), through the batch route",
)
@click.option(
    "--blob",
    "blob_args",
    multiple=True,
    metavar="NAME=PATH",
    help="store the file once in the namespace (uploaded only if new) and pass it as the "
    "keyword argument NAME (a Blob); repeatable",
)
@click.option(
    "--wait", type=SECONDS, default=None, help="then wait up to S seconds and print the result"
)
@click.option("--out", type=OUT_PATH, help="with --wait: write the result here")
@click.option(
    "--progress/--no-progress",
    default=None,
    help="progress bar (default: when stderr is a terminal)",
)
@click.pass_obj
def enqueue(
    settings: Settings, queue, file_path, json_text, jsonl_path, blob_args, wait, out, progress
) -> None:
    """Enqueue a job on QUEUE; prints the job id. The daemon's function is called with one
    argument: the file's bytes or the JSON value, and with each --blob NAME=PATH as a keyword
    argument (a Blob). With --jsonl, one job per line (printed one job id per line, in order),
    sent BATCH_MAX_JOBS at a time."""
    given = [x for x in (file_path, json_text, jsonl_path) if x is not None]
    if len(given) > 1 or (not given and not blob_args):
        raise click.UsageError("give exactly one of --file, --json or --jsonl (or --blob)")
    blob_paths = parse_blob_args(blob_args)
    if jsonl_path is not None:
        if wait is not None or out is not None or blob_paths:
            raise click.UsageError("--wait, --out and --blob take one job: not with --jsonl")
        enqueue_lines(settings, queue, read_jsonl(jsonl_path), progress)
        return
    args = one_value(file_path, json_text)
    try:
        with settings.client("client", progress=progress) as client:
            kwargs = {name: client.blob(path) for name, path in blob_paths.items()}
            job = client.queue(queue).submit(args, kwargs, progress=progress)
            click.echo(job.job_id)
            click.echo(f"enqueued job_id={job.job_id} queue={queue} tier={job.tier}", err=True)
            if wait is not None:
                emit_value(job.result(timeout=wait, progress=progress), out)
    except PayloadStoreError as e:
        fail(e, settings.verbose)
    except CodecError as e:
        refuse_value(e)


def one_value(file_path: str | None, json_text: str | None) -> tuple:
    """The job's one positional argument: the JSON value or the file's bytes (none: ())."""
    if json_text is not None:
        try:
            return (json.loads(json_text),)
        except ValueError as e:
            raise click.BadParameter(f"not JSON: {e}", param_hint="--json") from e
    if file_path == "-":
        return (sys.stdin.buffer.read(),)
    if file_path is not None:
        return (Path(file_path).read_bytes(),)
    return ()


def parse_blob_args(values: tuple[str, ...]) -> dict[str, Path]:
    out: dict[str, Path] = {}
    for item in values:
        name, sep, path = item.partition("=")
        if not sep or not name.isidentifier() or not path:
            raise click.BadParameter(f"{item!r} is not NAME=PATH", param_hint="--blob")
        if not Path(path).is_file():
            raise click.BadParameter(f"{path}: no such file", param_hint="--blob")
        out[name] = Path(path)
    return out


@cli.group()
def blob() -> None:
    """Blobs: content stored once per namespace, referenced by any number of jobs."""


@blob.command("put")
@click.argument("path", type=click.Path(exists=True, dir_okay=False))
@click.pass_obj
def blob_put(settings: Settings, path) -> None:
    """Store the file PATH once in the namespace (uploaded only if the namespace does not have
    it yet); prints its sha256."""
    try:
        with settings.client("client") as client:
            b = client.blob(Path(path))
            uploaded = client.blobs.bytes_uploaded
    except PayloadStoreError as e:
        fail(e, settings.verbose)
        return
    click.echo(b.sha256)
    click.echo(f"blob sha256={b.sha256} size={b.size} uploaded_bytes={uploaded}", err=True)


def read_jsonl(path: str) -> list[Any]:
    """Every value of a JSON Lines file, checked before anything is enqueued (blank lines skip)."""
    stream = sys.stdin if path == "-" else open(path, encoding="utf-8")  # noqa: SIM115
    values: list[Any] = []
    try:
        for number, line in enumerate(stream, start=1):
            if not line.strip():
                continue
            try:
                values.append(json.loads(line))
            except ValueError as e:
                raise click.BadParameter(
                    f"line {number} is not JSON: {e}", param_hint="--jsonl"
                ) from e
    finally:
        if stream is not sys.stdin:
            stream.close()
    if not values:
        raise click.BadParameter("no JSON values in the file", param_hint="--jsonl")
    return values


def enqueue_lines(settings: Settings, queue: str, values: list[Any], progress) -> None:
    from .errors import BatchError

    try:
        with settings.client("client", progress=progress) as client:
            try:
                jobs = client.queue(queue).map(values, progress=progress)
            except BatchError as e:
                for job in e.jobs:
                    click.echo(job.job_id if job is not None else "-")
                for index, error in sorted(e.errors.items()):
                    message = getattr(error, "message", None) or str(error)
                    click.echo(f"error: line {index + 1}: {message}", err=True)
                first = e.errors[min(e.errors)]
                sys.exit(getattr(first, "exit_code", 1))
    except PayloadStoreError as e:
        fail(e, settings.verbose)
    except CodecError as e:
        refuse_value(e)
    for job in jobs:
        click.echo(job.job_id)
    tiers = {t: sum(j.tier == t for j in jobs) for t in ("inline", "s3")}
    click.echo(
        f"enqueued {len(jobs)} jobs queue={queue} inline={tiers['inline']} s3={tiers['s3']}",
        err=True,
    )


@cli.command()
@click.argument("job_id")
@click.option(
    "--wait", type=SECONDS, default=0.0, show_default=True, help="seconds to wait for a pending job"
)
@click.option("--out", type=OUT_PATH, help="write the result here (bytes raw, else JSON)")
@click.option("--progress/--no-progress", default=None)
@click.pass_obj
def result(settings: Settings, job_id, wait, out, progress) -> None:
    """Print a job's result (JSON, or raw bytes); exit 5 while it is still pending."""
    try:
        with settings.client("client", progress=progress) as client:
            emit_value(client.job(job_id).result(timeout=wait, progress=progress), out)
    except PayloadStoreError as e:
        fail(e, settings.verbose)


@cli.command()
@click.argument("job_id")
@click.option(
    "--show-args",
    is_flag=True,
    help="also print the job's arguments (and result, once there is one): a decoded preview "
    "of inline values (S3 ones too, up to 1 MiB or their structure), the S3 reference of S3 ones",
)
@click.pass_obj
def status(settings: Settings, job_id, show_args: bool) -> None:
    """Print a job's status as JSON; with --show-args, then what it carried."""
    try:
        with settings.client("client") as client:
            job = client.job(job_id)
            click.echo(dumps_json(job.status().raw))
            if show_args:
                stored = job.payloads()
                show_payload("args", stored.args, client)
                if stored.result is not None:
                    show_payload("result", stored.result, client)
    except PayloadStoreError as e:
        fail(e, settings.verbose)


def show_payload(name: str, stored, client: Client) -> None:
    """`args: inline 12 B` or `args: s3 s3://bucket/key 5242880 B application/msgpack`, then the
    preview indented (never executes or unpickles anything: payloadstore._preview)."""
    from ._preview import describe

    facts = describe(stored, client.wire.http)
    line = [f"{name}:", str(facts["tier"] or "-")]
    if facts.get("key"):
        line.append(f"s3://{facts.get('bucket')}/{facts['key']}")
    if facts.get("size") is not None:
        line.append(f"{facts['size']} B")
    if facts.get("content_type"):
        line.append(str(facts["content_type"]))
    click.echo(" ".join(line))
    if facts.get("gone"):
        why = {
            "not_kept": "not kept (an inline job's arguments are freed when it succeeds)",
            "consumed": "consumed (retention consume deleted the object)",
            "answer_limit": "not shown (with the inline result it would pass the answer limit)",
        }
        click.echo("  " + why.get(facts["gone"], f"gone: {facts['gone']}"))
    elif facts.get("preview_error"):
        click.echo(f"  (no preview: {facts['preview_error']})")
    elif facts.get("preview") is not None:
        text = facts["preview"] + (" …(truncated)" if facts.get("truncated") else "")
        for row in text.splitlines() or [""]:
            click.echo("  " + row)


LIST_STATES = ("queued", "running", "failed", "cancelled", "succeeded")


@cli.command()
@click.argument("queue")
@click.option(
    "--state",
    type=click.Choice(LIST_STATES),
    default="queued",
    show_default=True,
    help="failed: every terminal state but succeeded and cancelled",
)
@click.option(
    "--limit", type=click.IntRange(1, 100), default=50, show_default=True, help="jobs per page"
)
@click.option("--cursor", help="start after this page (the `next` a previous listing printed)")
@click.option("--all", "every_page", is_flag=True, help="every page, not only the first")
@click.option("--json", "as_json", is_flag=True, help="one job status per line (JSON)")
@click.pass_obj
def jobs(settings: Settings, queue, state, limit, cursor, every_page, as_json) -> None:
    """A queue's jobs in one state, newest first: id, state, attempts, tier, age, error type.
    `payloadstore status JOB_ID` shows one job whole, with its remote traceback."""
    from ._jobs_table import jobs_table

    listed = []
    next_cursor = None
    try:
        with settings.client() as client:
            for page in client.queue(queue).jobs(state=state, limit=limit, cursor=cursor):
                listed.extend(page.jobs)
                next_cursor = page.next_cursor
                if not every_page:
                    break
    except PayloadStoreError as e:
        fail(e, settings.verbose)
    if as_json:
        for job in listed:
            click.echo(dumps_json(job.raw))
    else:
        click.echo(jobs_table(listed))
    if next_cursor and not every_page:
        click.echo(f"more: --cursor {next_cursor} (or --all)", err=True)
