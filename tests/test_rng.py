"""specnb.run.rng against std::mt19937 and libstdc++'s draws.

The numbers below were printed by a short C++ program using only the standard library, built
with g++ 12.2 (libstdc++, the library of the c392e50 build in tests/data) on this machine:
`std::mt19937 g(42)` outputs, `std::uniform_real_distribution<double>(0.0f, 1.0f)` and
`<float>` draws, and `std::discrete_distribution<int>` picks.
"""
import copy

import numpy as np
import pytest

from specnb.run.rng import LLAMA_DEFAULT_SEED, Mt19937, get_rng_seed


def test_mt19937_is_the_standard_generator():
    # [rand.predef]: the 10000th output of a default-constructed std::mt19937 (seed 5489)
    g = Mt19937(5489)
    for _ in range(9999):
        g.u32()
    assert g.u32() == 4123659995


def test_mt19937_stream_equals_numpy_randomstate():
    g = Mt19937(42)
    want = np.random.RandomState(42).randint(0, 2 ** 32, size=5, dtype=np.uint64).tolist()
    assert [g.u32() for _ in range(5)] == want == [1608637542, 3421126067, 4083286876,
                                                   787846414, 3143890026]


def test_uniform_double_and_float_as_libstdcxx():
    g = Mt19937(42)
    assert [g.canonical_double() for _ in range(5)] == [
        0.79654298428784598, 0.18343478789336848, 0.77969099761266125,
        0.59685016158005655, 0.44583275754843343]
    g = Mt19937(42)
    got = [float(g.canonical_float()) for _ in range(5)]
    assert got == pytest.approx([0.37454012, 0.796543002, 0.95071429, 0.183434784, 0.731993914],
                                rel=1e-8)


def test_discrete_distribution_as_libstdcxx():
    g = Mt19937(7)
    w = np.float32([0.5, 0.25, 0.125, 0.125])
    assert [g.discrete(w) for _ in range(12)] == [0, 0, 3, 0, 0, 0, 0, 0, 0, 1, 2, 0]
    # one weight: libstdc++ returns 0 without drawing, so the next output is the first one
    g = Mt19937(7)
    assert g.discrete([1.0]) == 0
    assert g.u32() == 327741615 == Mt19937(7).u32()


def test_reseed_and_copy_replay_the_stream():
    g = Mt19937(3)
    first = [g.u32() for _ in range(4)]
    c = copy.deepcopy(g)
    assert [g.u32() for _ in range(4)] == [c.u32() for _ in range(4)]
    g.seed(3)
    assert [g.u32() for _ in range(4)] == first


def test_default_seed_is_random():
    seeds = {get_rng_seed(LLAMA_DEFAULT_SEED) for _ in range(8)}
    assert len(seeds) > 1 and all(0 <= s < 2 ** 32 for s in seeds)
    assert get_rng_seed(123) == 123


def test_a_seed_seen_before_restarts_the_standard_stream_however_far_others_have_drawn():
    """Seeding reuses init_genrand's state for a seed seen before (a draft sampler reseeds every
    round): two generators of one seed, one drawn far (past the 624-word state), then reseeded,
    both give std::mt19937(42)'s outputs, and other seeds in between change nothing."""
    a, b = Mt19937(42), Mt19937(42)
    for _ in range(2000):
        a.u32()
    for s in range(100):                       # more seeds than the cache keeps
        Mt19937(s)
    a.seed(42)
    want = [1608637542, 3421126067, 4083286876, 787846414, 3143890026]
    assert [a.u32() for _ in range(5)] == want == [b.u32() for _ in range(5)]
