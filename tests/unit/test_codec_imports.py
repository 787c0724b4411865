"""numpy, torch and Pillow are optional: imported only when a value of theirs is met.

Each check runs in a fresh interpreter, since this test process has them all imported already.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import msgpack
import numpy as np
import pytest

from payloadstore import codec

ROOT = Path(__file__).resolve().parents[2]

# Makes `import numpy` (etc.) fail as if the package were not installed.
BLOCKER = """
import sys
BLOCKED = {blocked!r}
class Blocker:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ImportError(f"No module named {{name!r}} (blocked by the test)")
        return None
sys.meta_path.insert(0, Blocker())
"""


def _run(script: str, blocked: tuple[str, ...] = (), stdin: bytes = b"") -> str:
    source = BLOCKER.format(blocked=set(blocked)) + textwrap.dedent(script)
    done = subprocess.run(
        [sys.executable, "-c", source],
        check=False,
        cwd=ROOT,
        input=stdin,
        capture_output=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr.decode()
    return done.stdout.decode().strip()


def test_importing_and_using_the_codec_on_plain_values_imports_no_ml_library():
    # Given a fresh interpreter
    # When the codec is imported and round-trips a plain payload
    out = _run(
        """
        import sys
        from payloadstore import codec
        value = {"args": [1, "x", b"y", (2, 3)], "kwargs": {}}
        assert codec.decode(codec.encode(value).tobytes()) == {"args": [1, "x", b"y", [2, 3]], "kwargs": {}}
        print(sorted(m for m in ("numpy", "torch", "PIL") if m in sys.modules))
        """
    )

    # Then none of numpy, torch or PIL was imported
    assert out == "[]"


def test_encoding_numpy_arrays_does_not_import_torch_or_pillow():
    # Given a fresh interpreter where only numpy is imported by the user
    # When a numpy payload is encoded and decoded
    out = _run(
        """
        import sys
        import numpy as np
        from payloadstore import codec
        array = np.arange(10_000, dtype=np.float32)
        assert (codec.decode(codec.encode({"a": array}).tobytes())["a"] == array).all()
        print(sorted(m for m in ("torch", "PIL") if m in sys.modules))
        """
    )

    # Then torch and PIL stay unimported
    assert out == "[]"


def test_codec_works_when_the_ml_libraries_are_not_installed():
    # Given an interpreter where numpy, torch and PIL cannot be imported
    # When plain values round-trip
    out = _run(
        """
        from payloadstore import codec
        print(codec.decode(codec.encode({"n": [1.5, None, "s"]}).tobytes()))
        """,
        blocked=("numpy", "torch", "PIL"),
    )

    # Then the codec works
    assert out == "{'n': [1.5, None, 's']}"


def _tensor():
    import torch

    return torch.ones(2)


def _image():
    from PIL import Image

    return Image.new("L", (2, 2))


@pytest.mark.parametrize(
    ("blocked", "make_value", "package"),
    [
        (("numpy",), lambda: np.arange(3), "numpy"),
        (("numpy",), lambda: np.arange(3000), "numpy"),
        (("torch",), _tensor, "torch"),
        (("PIL",), _image, "Pillow"),
    ],
    ids=["numpy_inline", "numpy_out_of_band", "torch", "pillow"],
)
def test_decoding_a_value_whose_library_is_missing_names_the_package(blocked, make_value, package):
    # Given a payload holding a numpy array / torch tensor / PIL image
    value = make_value()
    payload = codec.encode({"v": value}).tobytes()

    # When a process without that library decodes it
    out = _run(
        """
        import sys
        from payloadstore import codec
        try:
            codec.decode(sys.stdin.buffer.read())
        except codec.CodecError as e:
            print(e)
        """,
        blocked=blocked,
        stdin=payload,
    )

    # Then it gets a CodecError naming the package to install
    assert f"install {package}" in out


def test_zaku_map_without_its_library_names_the_package():
    # Given a zaku numpy map, decoded where numpy is missing
    payload = msgpack.packb(
        {"ztype": "numpy.ndarray", "b": b"\0" * 4, "dtype": "float32", "shape": [1]}
    )
    out = _run(
        """
        import sys
        from payloadstore import codec
        try:
            codec.decode(sys.stdin.buffer.read())
        except codec.CodecError as e:
            print(e)
        """,
        blocked=("numpy",),
        stdin=payload,
    )

    # Then the error names numpy
    assert "install numpy" in out
