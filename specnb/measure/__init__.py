"""Measuring: Leviathan's closed forms (`cost`), statistics from a run's round events (`stats`),
sweeps (`experiments`), and the benchmarks (`bench`, `spec_bench`, `profile`, with llama.cpp's
own tools run side by side in `bench_llamacpp`). A learner can skip the benchmarks."""
