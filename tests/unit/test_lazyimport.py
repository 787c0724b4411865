"""Deferred imports (payloadstore_controlplane/runtime/lazyimport.py): what a placeholder package answers is what the
real package would, and the real `__init__` runs the moment anything else is asked of it."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from payloadstore_controlplane.runtime.lazyimport import reexports

FUNCTIONS = Path(__file__).resolve().parents[2] / "functions"


def test_reexports_reads_a_pure_reexporting_init():
    source = textwrap.dedent(
        '''
        """Docstring."""

        from __future__ import annotations

        from .a import A, B as C  # comment
        from pkg.sub.b import (
            D,
            E,
        )

        __all__ = [
            "A",
            "C",
        ]
        '''
    )
    assert reexports("pkg.sub", source) == {
        "A": "pkg.sub.a",
        "C": "pkg.sub.a",
        "D": "pkg.sub.b",
        "E": "pkg.sub.b",
    }


@pytest.mark.parametrize(
    "source",
    [
        "from .a import A\nsetup()\n",  # a side effect
        "from .a import *\n",  # names not known
        "import os\nfrom .a import A\n",
        "from ..up import A\n",  # not its own submodule
        "from other import A\n",
        "from .a import A\nif X:\n    from .b import B\n",
    ],
)
def test_reexports_refuses_anything_else(source):
    assert reexports("pkg.sub", source) is None


def run_probe(code: str, tmp_path: Path) -> str:
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{FUNCTIONS}"}
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    return out.stdout.strip()


def make_package(tmp_path: Path) -> None:
    pkg = tmp_path / "lazypkg" / "inner"
    pkg.mkdir(parents=True)
    (tmp_path / "lazypkg" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text(
        "from .one import ONE\nfrom .two import TWO, two\n__all__ = ['ONE', 'TWO', 'two']\n"
    )
    (pkg / "one.py").write_text("ONE = 1\n")
    (pkg / "two.py").write_text("TWO = 2\ndef two():\n    return 2\n")
    (pkg / "three.py").write_text("THREE = 3\n")


def test_a_reexporting_package_imports_only_the_submodule_of_a_name(tmp_path):
    make_package(tmp_path)
    out = run_probe(
        """
        import sys
        from payloadstore_controlplane.runtime.lazyimport import defer_reexports
        assert defer_reexports("lazypkg.inner")
        from lazypkg.inner import ONE
        print(ONE, "lazypkg.inner.two" in sys.modules)
        from lazypkg.inner import three  # a submodule the __init__ does not import
        print(three.THREE, sys.modules["lazypkg.inner"]._deferred_state)
        import lazypkg.inner
        print(lazypkg.inner.two(), lazypkg.inner.TWO)  # the function, not the submodule
        from lazypkg.inner import *
        print(sorted(n for n in dir() if n.isupper()), sys.modules["lazypkg.inner"]._deferred_state)
        """,
        tmp_path,
    )
    assert out.splitlines() == ["1 False", "3 deferred", "2 2", "['ONE', 'TWO'] loaded"]


def test_asyncio_is_loaded_in_part_until_used(tmp_path):
    out = run_probe(
        """
        import sys
        import payloadstore_controlplane  # installs the placeholders, as every function does first
        from asyncio import IncompleteReadError, StreamReader
        import asyncio
        print(asyncio._deferred_state, "asyncio.base_events" in sys.modules)
        try:
            asyncio.current_task()  # what every logging.LogRecord asks
        except RuntimeError as e:
            print(e)
        async def main():
            await asyncio.sleep(0)
            return "ran"
        print(asyncio.run(main()), asyncio._deferred_state)
        print(asyncio.StreamReader is StreamReader, asyncio.IncompleteReadError is IncompleteReadError)
        """,
        tmp_path,
    )
    assert out.splitlines() == [
        "deferred False",
        "no running event loop",
        "ran loaded",
        "True True",
    ]


def test_handlers_answer_with_the_real_resolver_after_deferral(tmp_path):
    out = run_probe(
        """
        import sys
        import payloadstore_controlplane.handlers.public as public
        from aws_lambda_powertools.event_handler import APIGatewayRestResolver
        import aws_lambda_powertools.event_handler.api_gateway as api_gateway
        print(APIGatewayRestResolver is api_gateway.APIGatewayRestResolver)
        print("aws_lambda_powertools.event_handler.appsync" in sys.modules)
        print("aws_lambda_powertools.utilities.data_classes.sqs_event" in sys.modules)
        from aws_lambda_powertools.event_handler import AppSyncResolver  # another name: imported
        print(AppSyncResolver.__name__)
        """,
        tmp_path,
    )
    assert out.splitlines() == ["True", "False", "False", "AppSyncResolver"]


def test_redis_driver_info_is_the_installed_version():
    from importlib.metadata import version

    from payloadstore_controlplane.store.redis_client import DRIVER_INFO

    assert DRIVER_INFO.lib_version == version("redis")
    assert DRIVER_INFO.formatted_name == "redis-py"


GC_PROBE = """
import gc
import payloadstore_controlplane.handlers
during = gc.isenabled()
import payloadstore_controlplane.handlers.public
print(during, gc.isenabled(), gc.get_freeze_count() > 0)
"""


def test_garbage_collection_pauses_for_the_handler_import_in_lambda_only(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(FUNCTIONS), "POWERTOOLS_TRACE_DISABLED": "true"}
    env.pop("AWS_EXECUTION_ENV", None)
    lam = {**env, "AWS_EXECUTION_ENV": "AWS_Lambda_python3.13"}
    outs = [
        subprocess.run(
            [sys.executable, "-c", GC_PROBE], capture_output=True, text=True, env=e, check=True
        ).stdout.strip()
        for e in (lam, env)
    ]
    # In Lambda: off while the handler imports, then on again with the import frozen
    assert outs[0] == "False True True"
    # Elsewhere: untouched
    assert outs[1] == "True True False"


METADATA_PROBE = """
import sys
import payloadstore_controlplane.handlers.payloads
from payloadstore_controlplane.models.api import PresignRequest
PresignRequest.model_validate({"op": "put", "kind": "args", "size": 1, "sha256": "0" * 64})
placeholder = sys.modules["importlib.metadata"]
print(getattr(placeholder, "_deferred_state", "real"))
import importlib.metadata
from importlib.metadata import version
print(version("redis") == importlib.metadata.version("redis"))
"""


@pytest.mark.parametrize("plugins_off,first", [(True, "deferred"), (False, "real")])
def test_importlib_metadata_waits_for_a_use_when_pydantic_plugins_are_off(plugins_off, first):
    env = {**os.environ, "PYTHONPATH": str(FUNCTIONS), "PAYLOAD_BUCKET": "b"}
    env.pop("PYDANTIC_DISABLE_PLUGINS", None)
    if plugins_off:
        env["PYDANTIC_DISABLE_PLUGINS"] = "__all__"
    out = subprocess.run(
        [sys.executable, "-c", METADATA_PROBE], capture_output=True, text=True, env=env, check=True
    ).stdout.split()
    # Then nothing a function's import and first validation does reads it (plugins off), and
    # the first real use gets the real module
    assert out[0] == first
    assert out[1] == "True"


JMESPATH_PROBE = """
import sys
import payloadstore_controlplane.handlers.public
print("jmespath" in sys.modules)
from aws_lambda_powertools import Logger
from aws_lambda_powertools.logging import correlation_paths

logger = Logger(service="probe")

@logger.inject_lambda_context(correlation_id_path=correlation_paths.API_GATEWAY_REST)
def handler(event, context):
    return logger.get_correlation_id()

class Context:
    function_name = "probe"
    memory_limit_in_mb = 128
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:probe"
    aws_request_id = "r"

print(handler({"requestContext": {"requestId": "abc"}}, Context()))
"""


def test_powertools_jmespath_helpers_wait_for_a_correlation_id_path():
    # Given a function's handler module imported as Lambda does
    env = {**os.environ, "PYTHONPATH": str(FUNCTIONS), "PAYLOAD_BUCKET": "b"}
    # When its cold import is done, and then a logger asks for a correlation id path
    out = subprocess.run(
        [sys.executable, "-c", JMESPATH_PROBE], capture_output=True, text=True, env=env, check=True
    ).stdout.split()
    # Then JMESPath was not imported for the handler, and the path still resolves on first use
    assert out == ["False", "abc"]
