"""Running a model and choosing tokens: the forward pass on each backend (`backend_cpu`,
`backend_cuda`), the `Context` with its KV cells (`context`: decode, `seq_rm`, state save and
load), llama.cpp's samplers and sampler chain (`samplers`, `sampling`, `rng`), plain decoding
(`generate`), perplexity, and a target/draft pair with its contexts (`pair`)."""
