"""`specdec pipeline`: every stage from one YAML file (stage.py); the only module that chains stages."""
