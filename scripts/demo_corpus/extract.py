"""Rebuild the demo training corpus from text that ships with Python and Debian.

This helper is run once by hand; its output (the ``*.txt`` files next to it) is
committed, so ``scripts/train_demo.py`` never depends on what a machine has
installed.  Every file it writes is a sequence of documents separated by a line
holding only ``<|endoftext|>``.  See ``SOURCES.md`` for provenance and licences.

Usage::

    python scripts/demo_corpus/extract.py [--stdlib DIR] [--licenses DIR]
"""

from __future__ import annotations

import argparse
import ast
import itertools
import sysconfig
from pathlib import Path

SEP = "\n<|endoftext|>\n"
HERE = Path(__file__).resolve().parent
MAX_DOC_CHARS = 3000

# Pure-Python stdlib modules copied verbatim (split per top-level definition) as code.
CODE_MODULES = (
    "bisect.py", "heapq.py", "textwrap.py", "colorsys.py", "graphlib.py", "shlex.py",
    "fnmatch.py", "glob.py", "reprlib.py", "string.py", "fractions.py", "statistics.py",
    "queue.py", "sched.py", "copy.py", "pprint.py", "base64.py", "functools.py",
    "contextlib.py", "operator.py", "random.py", "calendar.py", "csv.py",
    "json/__init__.py", "json/decoder.py", "json/encoder.py", "json/scanner.py",
    "json/tool.py", "difflib.py", "dataclasses.py",
)
# Modules (or packages) whose docstrings are extracted as prose.
DOCSTRING_MODULES = (
    "abc.py", "argparse.py", "ast.py", "asyncio", "bdb.py", "bz2.py", "cmd.py", "code.py",
    "codecs.py", "collections", "concurrent", "configparser.py", "contextvars.py",
    "datetime.py", "decimal.py", "_pydecimal.py", "dis.py", "doctest.py", "email",
    "enum.py", "filecmp.py", "fileinput.py", "ftplib.py", "getopt.py", "gettext.py",
    "gzip.py", "hashlib.py", "hmac.py", "html", "http", "imaplib.py", "importlib",
    "inspect.py", "ipaddress.py", "locale.py", "logging", "lzma.py", "mailbox.py",
    "mimetypes.py", "multiprocessing", "netrc.py", "numbers.py", "optparse.py", "os.py",
    "pathlib.py", "pdb.py", "pickle.py", "pkgutil.py", "platform.py", "plistlib.py",
    "posixpath.py", "pydoc.py", "_pyio.py", "quopri.py", "runpy.py", "secrets.py",
    "selectors.py", "shelve.py", "shutil.py", "smtplib.py", "socket.py", "socketserver.py",
    "sqlite3", "ssl.py", "subprocess.py", "tarfile.py", "tempfile.py", "threading.py",
    "timeit.py", "tokenize.py", "trace.py", "traceback.py", "types.py", "typing.py",
    "unittest", "urllib", "uuid.py", "warnings.py", "wave.py", "weakref.py", "xml",
    "zipfile.py", "zipimport.py", "zoneinfo",
)
DOCSTRING_BUDGET = 480_000
LICENSES = (
    "Apache-2.0", "Artistic", "BSD", "CC0-1.0", "GFDL-1.2", "GFDL-1.3", "GPL-1", "GPL-2",
    "GPL-3", "LGPL-2", "LGPL-2.1", "LGPL-3", "MPL-1.1", "MPL-2.0",
)


def chunk(text: str, limit: int = MAX_DOC_CHARS) -> list[str]:
    """Split ``text`` at blank lines into pieces of at most ~``limit`` characters."""
    pieces: list[str] = []
    cur = ""
    for para in text.split("\n\n"):
        if cur and len(cur) + len(para) + 2 > limit:
            pieces.append(cur)
            cur = para
        else:
            cur = f"{cur}\n\n{para}" if cur else para
    if cur.strip():
        pieces.append(cur)
    return [p.strip("\n") for p in pieces if p.strip()]


def clean(text: str) -> str:
    lines = [ln.rstrip() for ln in text.replace("\r\n", "\n").replace("\f", "").split("\n")]
    return "\n".join(lines).strip("\n")


def python_reference(stdlib: Path) -> list[str]:
    """The language/library reference topics that pydoc ships (pydoc_data/topics.py)."""
    tree = ast.parse((stdlib / "pydoc_data" / "topics.py").read_text(encoding="utf-8"))
    topics = ast.literal_eval(tree.body[0].value)  # type: ignore[attr-defined]
    docs: list[str] = []
    for key in sorted(topics):
        docs.extend(chunk(clean(topics[key])))
    return docs


def _module_files(stdlib: Path, name: str) -> list[Path]:
    path = stdlib / name
    if path.is_dir():
        return sorted(p for p in path.rglob("*.py") if "test" not in p.parts)
    return [path]


def _signature(node: ast.FunctionDef | ast.AsyncFunctionDef) -> str:
    return f"{node.name}({ast.unparse(node.args)})"


def _visit(body: list[ast.stmt], prefix: str, entries: list[str]) -> None:
    for node in body:
        if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
            doc = ast.get_docstring(node)
            if doc and len(doc) > 60:
                entries.append(f"class {prefix}{node.name}\n\n{doc}")
            _visit(node.body, f"{prefix}{node.name}.", entries)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if node.name.startswith("_") and node.name != "__init__":
                continue
            doc = ast.get_docstring(node)
            if doc and len(doc) > 60:
                entries.append(f"{prefix}{_signature(node)}\n\n{doc}")


def python_docstrings(stdlib: Path) -> list[str]:
    """Module, class and function docstrings, each headed by its qualified name."""
    docs: list[str] = []
    total = 0
    for name in DOCSTRING_MODULES:
        for path in _module_files(stdlib, name):
            rel = path.relative_to(stdlib).with_suffix("").as_posix()
            mod = rel.replace("/", ".").removesuffix(".__init__")
            tree = ast.parse(path.read_text(encoding="utf-8"))
            entries: list[str] = []
            mdoc = ast.get_docstring(tree)
            if mdoc and len(mdoc) > 80:
                entries.append(f"Module {mod}\n\n{mdoc}")
            _visit(tree.body, f"{mod}.", entries)
            for entry in entries:
                for piece in chunk(clean(entry)):
                    if total + len(piece) > DOCSTRING_BUDGET:
                        return docs
                    docs.append(piece)
                    total += len(piece)
    return docs


def python_code(stdlib: Path) -> list[str]:
    """Source of small pure-Python modules, one document per top-level definition."""
    docs: list[str] = []
    for name in CODE_MODULES:
        src = (stdlib / name).read_text(encoding="utf-8")
        lines = src.split("\n")
        tree = ast.parse(src)
        starts = [
            (n.decorator_list[0].lineno if getattr(n, "decorator_list", None) else n.lineno)
            for n in tree.body
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
        ]
        bounds = [0, *[s - 1 for s in starts], len(lines)]
        header = f"# Lib/{name}\n"
        for lo, hi in itertools.pairwise(bounds):
            body = clean("\n".join(lines[lo:hi]))
            if len(body) < 40:
                continue
            for piece in chunk(body, 4000):
                docs.append(header + piece)
    return docs


def licenses(root: Path) -> list[str]:
    """Debian's common licence texts, verbatim, split into ~3 KB pieces."""
    docs: list[str] = []
    for name in LICENSES:
        docs.extend(chunk(clean((root / name).read_text(encoding="utf-8"))))
    return docs


def write(name: str, docs: list[str]) -> None:
    for doc in docs:
        assert "<|endoftext|>" not in doc, name
    text = SEP.join(docs) + "\n"
    (HERE / name).write_text(text, encoding="utf-8")
    print(f"{name}: {len(docs)} documents, {len(text.encode()):,} bytes")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--stdlib", type=Path, default=Path(sysconfig.get_paths()["stdlib"]))
    ap.add_argument("--licenses", type=Path, default=Path("/usr/share/common-licenses"))
    args = ap.parse_args()
    write("python_reference.txt", python_reference(args.stdlib))
    write("python_docstrings.txt", python_docstrings(args.stdlib))
    write("python_code.txt", python_code(args.stdlib))
    write("licenses.txt", licenses(args.licenses))
    (HERE / "PSF-LICENSE.txt").write_text(
        (args.stdlib / "LICENSE.txt").read_text(encoding="utf-8"), encoding="utf-8"
    )


if __name__ == "__main__":
    main()
