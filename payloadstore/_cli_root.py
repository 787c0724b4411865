"""What every command of the `payloadstore` command line takes: the root group with its options,
the settings it hands each command (`Settings`: which endpoint, token and namespace), and the
parameter types of durations and output files."""

from __future__ import annotations

import logging
import math
import os
import sys
from pathlib import Path
from typing import Any

import click

from ._client_core import (
    DEFAULT_NAMESPACE,
    ENV_ENDPOINT,
    ENV_NAMESPACE,
    ENV_TOKEN,
    find_devstack_file,
    read_devstack,
)
from .client import Client
from .errors import ConfigError


class Settings:
    def __init__(
        self,
        endpoint: str | None,
        token: str | None,
        namespace: str | None,
        devstack: str | None,
        verbose: bool,
    ):
        self.endpoint = endpoint
        self.token = token
        self.namespace = namespace
        self.devstack = devstack
        self.verbose = verbose

    def devstack_file(self) -> Path | None:
        return Path(self.devstack) if self.devstack else find_devstack_file()

    def client(self, role: str = "client", **kwargs: Any) -> Client:
        """Flags and PAYLOADSTORE_* variables, else the local stack's .devstack.json: the
        endpoint and the token from the same one (a given token never goes to a .devstack.json
        endpoint)."""
        namespace = self.namespace or DEFAULT_NAMESPACE
        endpoint, token = self.endpoint, self.token
        if not (endpoint and token):
            found = self.devstack_file()
            if found is None or not found.exists():
                missing = " and ".join(
                    n
                    for n, v in (
                        (f"--endpoint/{ENV_ENDPOINT}", endpoint),
                        (f"--token/{ENV_TOKEN}", token),
                    )
                    if not v
                )
                raise ConfigError(
                    f"set {missing}, or start the local stack (payloadstore dev) so .devstack.json exists"
                )
            _, stack = read_devstack(found)
            # A token goes only to an endpoint of its own source: a token given (flag or
            # environment) is never sent to the endpoint a .devstack.json names (any directory
            # above may hold one, e.g. a cloned repository's), and a .devstack.json token only
            # to its own stack.
            if token:
                raise ConfigError(
                    f"a token from --token/{ENV_TOKEN} needs its endpoint from the same place: "
                    f"set --endpoint/{ENV_ENDPOINT} (not taken from {found})"
                )
            if endpoint and endpoint.rstrip("/") != str(stack.get("endpoint") or "").rstrip("/"):
                raise ConfigError(
                    f"an endpoint from --endpoint/{ENV_ENDPOINT} needs its token from the same "
                    f"place: set --token/{ENV_TOKEN} ({found} holds tokens of "
                    f"{stack.get('endpoint')}, not {endpoint})"
                )
            endpoint = endpoint or stack.get("endpoint")
            try:
                token = stack["namespaces"][namespace][f"{role}_token"]
            except (KeyError, TypeError) as e:
                raise ConfigError(f"{found} has no {role} token for namespace {namespace!r}") from e
        if not endpoint:
            # A .devstack.json without an endpoint: Client's own refusal, before any other.
            raise ConfigError(f"no control-plane endpoint: pass endpoint= or set {ENV_ENDPOINT}")
        return Client(endpoint, token, namespace, **kwargs)

    def endpoint_only(self) -> str:
        if self.endpoint:
            return self.endpoint
        found = self.devstack_file()
        if found is None or not found.exists():
            raise ConfigError(
                f"set --endpoint/{ENV_ENDPOINT}, or start the local stack (payloadstore dev)"
            )
        return read_devstack(found)[1]["endpoint"]


class Seconds(click.ParamType):
    """A duration in seconds: a number >= `min_s` (`inf`: no limit, where `finite` is not
    asked); NaN, infinities where a finite one is needed, and numbers below it are bad input
    (exit 2), refused before any call (click's FloatRange lets NaN through)."""

    name = "seconds"

    def __init__(self, min_s: float = 0.0, *, finite: bool = False):
        self.min_s, self.finite = min_s, finite

    def convert(self, value: Any, param: Any, ctx: Any) -> float:
        try:
            seconds = float(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a number of seconds", param, ctx)
        if math.isnan(seconds) or seconds < self.min_s or (self.finite and math.isinf(seconds)):
            kind = "a finite number" if self.finite else "a number"
            self.fail(f"{value!r} is not {kind} of seconds >= {self.min_s:g}", param, ctx)
        return seconds


SECONDS = Seconds()


class OutPath(click.Path):
    """A file to write the result into: not a directory, in a directory that exists, refused
    before any call (else the job is enqueued and run, and its result lost at the end)."""

    def __init__(self) -> None:
        super().__init__(dir_okay=False)

    def convert(self, value: Any, param: Any, ctx: Any) -> Any:
        path = super().convert(value, param, ctx)
        parent = os.path.dirname(os.path.abspath(os.fspath(path)))
        if not os.path.isdir(parent):
            self.fail(f"{os.fspath(path)!r}: no directory {parent!r} to write it in", param, ctx)
        return path


OUT_PATH = OutPath()


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--endpoint", envvar=ENV_ENDPOINT, help=f"control-plane URL [{ENV_ENDPOINT}]")
@click.option("--token", envvar=ENV_TOKEN, help=f"bearer token [{ENV_TOKEN}]")
@click.option(
    "--namespace",
    "-n",
    envvar=ENV_NAMESPACE,
    help=f"namespace [{ENV_NAMESPACE}, default {DEFAULT_NAMESPACE}]",
)
@click.option(
    "--devstack",
    type=click.Path(dir_okay=False),
    envvar="PAYLOADSTORE_DEVSTACK",
    help="the local stack's state file [default: .devstack.json here or above]",
)
@click.option("--verbose", "-v", is_flag=True, help="log requests and show remote tracebacks")
@click.pass_context
def cli(ctx: click.Context, endpoint, token, namespace, devstack, verbose) -> None:
    """Queue jobs whose payloads live inline in Redis or in S3, and run daemons for them."""
    from ._logtime import utc_handler

    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING,
        handlers=[
            utc_handler(
                logging.StreamHandler(sys.stderr), "%(asctime)s %(levelname)s %(name)s %(message)s"
            )
        ],
    )
    ctx.obj = Settings(endpoint, token, namespace, devstack, verbose)
