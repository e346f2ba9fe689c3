"""The driving schema: scaffold compiler, tokenizers, prompt rendering and strict parser."""
