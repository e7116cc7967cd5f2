"""specdec: from a Hugging Face target + draft pair to measured, lossless speculative decoding on a phone."""

__version__ = "0.1.0"
