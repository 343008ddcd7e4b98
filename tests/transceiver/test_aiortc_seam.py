"""The one seam to aiortc and aioice (``transceiver.call.seam``): nothing else in product code
touches their internals, and the seam's start check fails on an aiortc that moved one.

The product code is read, not run (its text and its syntax tree): no ``_RTC``, no
``__class__ =``, no name-mangled ``._Class__x``, no private attribute of theirs on any object
(nor on ``self`` in a subclass of theirs), and no import of theirs beyond the names they export
and the three stateless helpers the seam's table names.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import re
import types
from pathlib import Path

import aioice
import aiortc
import pytest
from aiortc import RTCRtpReceiver

from transceiver.call import seam

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("common", "relay", "transceiver")
SEAM = ROOT / "transceiver" / "call" / "seam"
# Unexported modules whose stateless helpers product code uses outside the seam (its table's
# last paragraph): (module path, module imported).
HELPERS = {
    ("transceiver/signaling/offer.py", "aiortc.sdp"),
    ("transceiver/call/sctp.py", "aiortc.utils"),
    ("transceiver/socket/classify.py", "aioice.stun"),
}
# Private names of other libraries that aiortc or aioice happen to use too: (module, name).
NOT_THEIRS = {("transceiver/backends/websocket.py", "_writer")}  # aiohttp's websocket writer
MANGLED = re.compile(r"\b_[A-Z][A-Za-z0-9]*__[A-Za-z_]")
PRIVATE_OF_SELF = re.compile(r"\b(?:self|cls)\.(_[A-Za-z]\w*)|\bdef (_[A-Za-z]\w*)")


def product_files() -> list[Path]:
    files = [f for package in PRODUCT for f in sorted((ROOT / package).rglob("*.py"))]
    assert len(files) > 50 and any(f.is_relative_to(SEAM) for f in files)
    return [f for f in files if not f.is_relative_to(SEAM)]


def private_names(*modules: object) -> set[str]:
    """The single-underscore names aiortc's and aioice's own code gives its objects."""
    names: set[str] = set()
    for module in modules:
        for source in Path(module.__file__).parent.rglob("*.py"):  # type: ignore[attr-defined]
            for found in PRIVATE_OF_SELF.findall(source.read_text()):
                names.update(n for n in found if n and not n.startswith("__"))
    return names


THEIRS = private_names(aiortc, aioice)


def test_their_private_names_are_known():
    """The scan below is only as good as this set: it holds what the seam touches."""
    assert {"_rx_srtp", "_nominated", "_check_list", "_connection", "_run_rtp"} <= THEIRS


@pytest.mark.parametrize("path", product_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_product_module_outside_the_seam_touches_aiortc_internals(path: Path):
    text = path.read_text()
    where = path.relative_to(ROOT).as_posix()
    assert "_RTC" not in text, f"{where}: aiortc's name-mangled state belongs in the seam"
    assert "__class__ =" not in text, f"{where}: a class swap belongs in the seam"
    assert not MANGLED.search(text), f"{where}: name-mangled access belongs in the seam"
    tree = ast.parse(text)
    assert not list(_foreign_imports(tree, where)), f"{where}: imports aiortc/aioice internals"
    assert not list(_private_access(tree, where)), f"{where}: touches aiortc/aioice state"
    if path.name != "__main__.py" and any(isinstance(n, ast.ClassDef) for n in tree.body):
        module = importlib.import_module(where.removesuffix(".py").replace("/", "."))
        assert not list(_private_of_subclasses(tree, module)), (
            f"{where}: a subclass of aiortc/aioice touches its base's private state"
        )


def _foreign_imports(tree: ast.Module, where: str):
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in ("aiortc", "aioice"):
                    yield alias.name  # ``import aiortc.x``: a whole module, internals and all
        elif isinstance(node, ast.ImportFrom) and node.module:
            top = node.module.split(".")[0]
            if top not in ("aiortc", "aioice"):
                continue
            if node.module in ("aiortc", "aioice"):  # names, or a submodule (``from x import y``)
                exported = aiortc.__all__ if top == "aiortc" else aioice.__all__
                modules = [f"{top}.{a.name}" for a in node.names if a.name not in exported]
            else:
                modules = [node.module]
            yield from (m for m in modules if (where, m) not in HELPERS)


def _private_access(tree: ast.Module, where: str = ""):
    """``obj._x`` for a name of theirs, on anything but ``self``/``cls``; ``getattr(obj, "_x")``
    and its kin with such a name (unless ``NOT_THEIRS`` says whose it is)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in THEIRS:
            if not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
                yield ast.unparse(node)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "setattr", "hasattr", "delattr")
            and len(node.args) > 1
            and isinstance(node.args[1], ast.Constant)
            and node.args[1].value in THEIRS
            and (where, node.args[1].value) not in NOT_THEIRS
        ):
            yield ast.unparse(node)


def _private_of_subclasses(tree: ast.Module, module: types.ModuleType):
    """``self._x`` in a class of ours that derives from one of theirs, ``_x`` being a name its
    aiortc/aioice bases use (read from their source)."""
    for node in tree.body:
        if not isinstance(node, ast.ClassDef):
            continue
        bases = [
            c
            for c in getattr(module, node.name).__mro__
            if c.__module__.split(".")[0] in ("aiortc", "aioice")
        ]
        names = {
            name
            for base in bases
            for found in PRIVATE_OF_SELF.findall(inspect.getsource(base))
            for name in found
            if name and not name.startswith("__")
        }
        for inner in ast.walk(node):
            if (
                isinstance(inner, ast.Attribute)
                and isinstance(inner.value, ast.Name)
                and inner.value.id in ("self", "cls")
                and inner.attr in names
            ):
                yield f"{node.name}: {ast.unparse(inner)}"


def test_the_scans_find_what_they_look_for():
    """Each scan fails on the kind of line it exists to keep out (so a passing scan means
    something)."""
    caught = ast.parse(
        "dtls._rx_srtp = x\n"
        "getattr(pc, '_connection')\n"
        "from aiortc.rtcrtpreceiver import StreamStatistics\n"
        "from aiortc import RTCPeerConnection\n"
        "import aioice.ice\n"
    )
    assert list(_private_access(caught)) == ["dtls._rx_srtp", "getattr(pc, '_connection')"]
    assert list(_foreign_imports(caught, "transceiver/x.py")) == [
        "aiortc.rtcrtpreceiver",
        "aioice.ice",
    ]
    assert MANGLED.search("receiver._RTCRtpReceiver__codecs")
    source = (
        "class Ours(RTCRtpReceiver):\n    def f(self):\n        return self._enabled, self._mine\n"
    )
    module = types.ModuleType("ours")
    module.RTCRtpReceiver = RTCRtpReceiver  # type: ignore[attr-defined]
    exec(source, module.__dict__)
    assert list(_private_of_subclasses(ast.parse(source), module)) == ["Ours: self._enabled"]


def test_the_installed_aiortc_has_every_internal_of_the_table():
    seam.check()


@pytest.mark.parametrize(
    ("cls", "name"),
    [
        (aioice.Connection, "_check_list_maybe_complete"),
        (aiortc.RTCRtpReceiver, "_handle_rtp_packet"),
        (aiortc.RTCRtpSender, "_run_rtp"),
        (aiortc.RTCSctpTransport, "_send_sack"),
        (aiortc.RTCCertificate, "_create_ssl_context"),
    ],
)
def test_an_aiortc_that_moved_an_internal_fails_at_start_naming_it(cls, name, monkeypatch):
    monkeypatch.delattr(cls, name)
    with pytest.raises(RuntimeError, match=rf"{cls.__name__}\.{name}.*not supported"):
        seam.check()


def test_an_aiortc_whose_objects_lack_their_state_fails_at_start(monkeypatch):
    """Attributes set by constructors, read from throwaway objects at start."""
    init = aiortc.RTCDtlsTransport.__init__

    def without_rx_srtp(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        init(self, *args, **kwargs)
        del self._rx_srtp

    monkeypatch.setattr(aiortc.RTCDtlsTransport, "__init__", without_rx_srtp)
    with pytest.raises(RuntimeError, match=r"RTCDtlsTransport\._rx_srtp"):
        seam.check()
