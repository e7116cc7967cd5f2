"""The portable device runtime: Debian's arm64 CPython + glibc + numpy/onnxruntime wheels (docs/design.md §8).

`recipe` pins what goes in, `fetch` downloads it (apt under a private state dir, pip), `assemble`
lays out and prunes the tree, `archive` builds the content-addressed archive and caches it,
`remote` pushes it once per device and checks it by hash, `probe` names the step that fails on a
phone (loader, import, session). `boot.py` and `specdec-run` are the two files that run there.
"""
