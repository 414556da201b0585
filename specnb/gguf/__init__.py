"""The file: a bounds-checked GGUF reader (`file`), a writer (`write`), and forged variants of a
model (`forge`: truncated layers, requantized weights, mutated vocabs) for experiments and tests."""
