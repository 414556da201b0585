"""Speculation, as llama.cpp's common/speculative.cpp and examples/speculative-simple do it: the
speculator interface (`impl`), the draft model (`draft_simple`), the n-gram speculators (`ngram`,
`ngram_cache`, `ngram_mod`), the chain (`speculative`), each round's draft length (`draft_len`;
`auto` and its measured costs, `auto_costs`), verification (`verify`), the round records
(`events`) and the full loop (`loop`).
The fifty-line version of the same loop is specnb/speculative_simple.py."""
