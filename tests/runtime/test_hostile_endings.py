"""A script whose value or error has methods that raise or lie ends as `ok` or `error`, never
as a crash of the interpreter: the kernel reads the script's objects without trusting them."""

from __future__ import annotations

import pytest

from toolscript import Runtime

ENDINGS = {
    "a repr that returns a str subclass whose len raises": (
        "class S(str):\n"
        "    def __len__(self):\n"
        "        return 1 / 0\n"
        "class A:\n"
        "    def __repr__(self):\n"
        "        return S('plain')\n"
        "A()",
        "ok",
    ),
    "a repr that raises an error whose str raises": (
        "class E(Exception):\n"
        "    def __str__(self):\n"
        "        raise RuntimeError('no str')\n"
        "class A:\n"
        "    def __repr__(self):\n"
        "        raise E()\n"
        "A()",
        "ok",
    ),
    "an error whose __class__ raises": (
        "class E(Exception):\n"
        "    @property\n"
        "    def __class__(self):\n"
        "        raise RuntimeError('cls')\n"
        "raise E('z')",
        "error",
    ),
    "sys.exit of an object whose repr raises": (
        "import sys\n"
        "class A:\n"
        "    def __repr__(self):\n"
        "        raise RuntimeError('r')\n"
        "sys.exit(A())",
        "error",
    ),
    "sys.exit of an object whose __eq__ raises": (
        "import sys\n"
        "class A:\n"
        "    def __eq__(self, other):\n"
        "        raise RuntimeError('eq')\n"
        "    __hash__ = None\n"
        "sys.exit(A())",
        "error",
    ),
    "sys.exit of an integer too long to print": ("import sys\nsys.exit(10**5000)", "error"),
    "a SystemExit whose code raises": (
        "class X(SystemExit):\n"
        "    @property\n"
        "    def code(self):\n"
        "        raise RuntimeError('code')\n"
        "raise X(1)",
        "error",
    ),
}


@pytest.mark.timeout(30)
@pytest.mark.parametrize("source, status", ENDINGS.values(), ids=list(ENDINGS))
async def test_a_value_or_error_whose_methods_raise_does_not_crash_the_interpreter(
    runtime: Runtime, source: str, status: str
) -> None:
    await runtime.run("kept = 'yes'")
    result = await runtime.run(source)
    assert result.status == status, result.text
    after = await runtime.run("kept")
    assert after.value == "'yes'", after.text
    assert after.generation == result.generation
