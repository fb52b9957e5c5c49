"""The wgmma lessons (kernel="<rung>:lesson", kernels/ladder/19-24) against the engine's copies of the same code
(kernel="<rung>", kernels/engine/): where both take the same path, the same tiles, split and order of sums, so the
same bits. A lesson that read a tile from the wrong place, lost a split-K slice or stored past an edge would show
here, beside the generic tests' accuracy checks, which every registry name gets."""
import numpy as np
import pytest

import fastsgemm
from conftest import TRANSPOSE_IDS, TRANSPOSES, needs_hopper, random_matrix, run_raw

# (lesson, engine, the layouts (trans_a, trans_b) where both take the wgmma path the lesson teaches)
EVERY = TRANSPOSES
K_CONTIGUOUS_A = [t for t in TRANSPOSES if not t[0]]  # rung 21: A row-major, read raw by tensor copies
COPY_ENGINE = [t for t in TRANSPOSES if not (t[0] and not t[1])]  # rungs 22-23: a k-contiguous operand
PAIRS = [("tf32:lesson", "tf32", EVERY), ("tf32x3:lesson", "tf32x3", EVERY),
         ("tf32x3_regs:lesson", "tf32x3_regs", K_CONTIGUOUS_A),
         ("tf32x3_inplace:lesson", "tf32x3_inplace", COPY_ENGINE), ("tf32_tma:lesson", "tf32_tma", COPY_ENGINE)]
CASES = [(lesson, engine, t) for lesson, engine, layouts in PAIRS for t in layouts]
# Odd edges, a K of one partial k-tile, and a K past 4096 (the planner cuts it into split-K slices side by side).
SHAPES = [(257, 130, 515), (64, 256, 7), (33, 129, 8200)]


def test_every_wgmma_rung_has_a_lesson_here():
    lessons = {f"{k.name}:lesson" for k in fastsgemm.kernels() if k.rung and k.rung >= 19
               for c in k.configs if c.name == "lesson"}
    assert lessons - {"ozaki:lesson"} == {lesson for lesson, _, _ in PAIRS}


@pytest.mark.gpu
@pytest.mark.parametrize("lesson,engine,layout", CASES,
                         ids=[f"{l}-{TRANSPOSE_IDS[TRANSPOSES.index(t)]}" for l, _, t in CASES])
@pytest.mark.parametrize("m,n,k", SHAPES, ids=[f"{m}x{n}x{k}" for m, n, k in SHAPES])
def test_a_lesson_gives_the_engines_bits(lesson, engine, layout, m, n, k, rng):
    needs_hopper()
    A, B = random_matrix(rng, m, k), random_matrix(rng, k, n)
    trans_a, trans_b = layout
    mine = run_raw(lesson, A, B, trans_a, trans_b, pad=True)  # lines padded with NaN to multiples of 4 floats
    theirs = run_raw(engine, A, B, trans_a, trans_b, pad=True)
    assert not np.isnan(mine).any()
    mismatches = np.argwhere(mine != theirs)
    assert mismatches.size == 0, f"{len(mismatches)} elements differ, first at {mismatches[:3].tolist()}"
