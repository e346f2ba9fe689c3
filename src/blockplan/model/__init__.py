"""Models: the Qwen2-compatible decoder, mask builders, vision encoder, weights I/O."""
