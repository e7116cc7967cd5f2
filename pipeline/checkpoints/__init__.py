"""Where checkpoints come from: Hugging Face directories and hub ids, GGUF files, and the built-in models.

`source.locate` turns what a user typed (a path, a hub id, a `.gguf` file, `demo`) into a
`CheckpointSource` that transformers' `from_pretrained` reads; export and draft both load through it.
"""
