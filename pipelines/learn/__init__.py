"""Learn stage: the Multi-Conv DAPO loss, token-budget packing and response-only logprobs."""
