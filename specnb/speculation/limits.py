"""The limits of the speculators' parameters, defined once: impl.py checks them, the n-gram
speculators, draft_len.py (the length policies) and the flag table read them."""

DRAFT_N_MAX_LIMIT = 256     # specnb's: the per-position statistics are n_max long (master: none)
NGRAM_SIZE_LIMIT = 1024     # master's --spec-ngram-*-size-n/-m and -mod-* (common/arg.cpp:4163-4285)
MIN_HITS_LIMIT = 65535      # master stores min_hits in a uint16_t (common/common.h:361)
