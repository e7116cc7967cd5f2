"""The `specdec` command line: thin Typer commands over the pipeline stages."""
