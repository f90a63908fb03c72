"""The SmolLM2 decode's matrix products on the CPU (8 rows against each weight), by method,
next to the machine's memory bandwidth: what bounds a decode step that reads 540 MB of fp32
weights. Prints milliseconds and GB/s of weight read per product.

    python bench/small_m_products.py [--rows 8] [--threads 2]

Methods: ``x @ W^T`` (MKL, what ``F.linear`` does), ``(W @ x^T)^T`` (the orientation the
fused decoder uses on the CPU), one matrix-vector product (``torch.mv``, one row: the GEMV
kernel's rate), the product written as multiply-and-sum compiled by inductor, and with
``--cpp`` two plain AVX2 kernels. The
bandwidth reference is a sum over a 540 MB tensor. Small weights are re-read from cache in a
loop like this one; in a decode step every weight comes from memory once.
"""

from __future__ import annotations

import argparse
import functools
import json
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F


def per_call(fn: Callable[[], object], n: int) -> float:
    for _ in range(3):
        fn()
    t = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t) / n


# Two plain AVX2 kernels for the same product (``--cpp``, compiled at start, about 60 s):
# each weight row read once, one 8-wide accumulator per input row, parallel over weight
# rows; and the same blocked as 3 weight rows x 4 input rows (fewer loads per FMA).
CPP = r'''
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <immintrin.h>

static inline float hsum(__m256 v) {
  __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
  lo = _mm_add_ps(lo, hi);
  __m128 sh = _mm_movehdup_ps(lo); lo = _mm_add_ps(lo, sh);
  sh = _mm_movehl_ps(sh, lo); lo = _mm_add_ss(lo, sh);
  return _mm_cvtss_f32(lo);
}

template <int M>
static void rows(const float* X, const float* W, float* O, int64_t K, int64_t N, int64_t n0, int64_t n1) {
  for (int64_t n = n0; n < n1; ++n) {
    const float* wr = W + n * K;
    __m256 acc[M];
    for (int m = 0; m < M; ++m) acc[m] = _mm256_setzero_ps();
    int64_t k = 0;
    for (; k + 8 <= K; k += 8) {
      __m256 wv = _mm256_loadu_ps(wr + k);
      for (int m = 0; m < M; ++m) acc[m] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(X + m * K + k), acc[m]);
    }
    for (int m = 0; m < M; ++m) {
      float s = hsum(acc[m]);
      for (int64_t kk = k; kk < K; ++kk) s += wr[kk] * X[m * K + kk];
      O[m * N + n] = s;
    }
  }
}

torch::Tensor small_m_linear(torch::Tensor x, torch::Tensor w) {
  TORCH_CHECK(x.dtype() == torch::kFloat32 && w.dtype() == torch::kFloat32, "fp32 only");
  x = x.contiguous(); w = w.contiguous();
  const int64_t M = x.size(0), K = x.size(1), N = w.size(0);
  TORCH_CHECK(M >= 1 && M <= 8, "1..8 rows");
  auto out = torch::empty({M, N}, x.options());
  const float* X = x.data_ptr<float>(); const float* W = w.data_ptr<float>(); float* O = out.data_ptr<float>();
  at::parallel_for(0, N, 64, [&](int64_t a, int64_t b) {
    switch (M) {
      case 1: rows<1>(X, W, O, K, N, a, b); break; case 2: rows<2>(X, W, O, K, N, a, b); break;
      case 3: rows<3>(X, W, O, K, N, a, b); break; case 4: rows<4>(X, W, O, K, N, a, b); break;
      case 5: rows<5>(X, W, O, K, N, a, b); break; case 6: rows<6>(X, W, O, K, N, a, b); break;
      case 7: rows<7>(X, W, O, K, N, a, b); break; default: rows<8>(X, W, O, K, N, a, b); break;
    }
  });
  return out;
}

// R weight rows x G input rows: R*G accumulators, R weight vectors and one input vector live
template <int R, int G>
static inline void block(const float* X, const float* W, float* O, int64_t K, int64_t N,
                         int64_t n, int m0) {
  __m256 acc[R][G];
  for (int r = 0; r < R; ++r) for (int g = 0; g < G; ++g) acc[r][g] = _mm256_setzero_ps();
  int64_t k = 0;
  for (; k + 8 <= K; k += 8) {
    __m256 w[R];
    for (int r = 0; r < R; ++r) w[r] = _mm256_loadu_ps(W + (n + r) * K + k);
    for (int g = 0; g < G; ++g) {
      __m256 xv = _mm256_loadu_ps(X + (m0 + g) * K + k);
      for (int r = 0; r < R; ++r) acc[r][g] = _mm256_fmadd_ps(w[r], xv, acc[r][g]);
    }
  }
  for (int r = 0; r < R; ++r) for (int g = 0; g < G; ++g) {
    float s = hsum(acc[r][g]);
    for (int64_t kk = k; kk < K; ++kk) s += W[(n + r) * K + kk] * X[(m0 + g) * K + kk];
    O[(m0 + g) * N + n + r] = s;
  }
}

template <int R>
static void rows_block(const float* X, const float* W, float* O, int64_t M, int64_t K, int64_t N, int64_t n) {
  int m0 = 0;
  for (; m0 + 4 <= M; m0 += 4) block<R, 4>(X, W, O, K, N, n, m0);
  switch (M - m0) {
    case 3: block<R, 3>(X, W, O, K, N, n, m0); break;
    case 2: block<R, 2>(X, W, O, K, N, n, m0); break;
    case 1: block<R, 1>(X, W, O, K, N, n, m0); break;
    default: break;
  }
}

torch::Tensor small_m_linear_blocked(torch::Tensor x, torch::Tensor w) {
  TORCH_CHECK(x.dtype() == torch::kFloat32 && w.dtype() == torch::kFloat32, "fp32 only");
  x = x.contiguous(); w = w.contiguous();
  const int64_t M = x.size(0), K = x.size(1), N = w.size(0);
  auto out = torch::empty({M, N}, x.options());
  const float* X = x.data_ptr<float>(); const float* W = w.data_ptr<float>(); float* O = out.data_ptr<float>();
  const int64_t nb = N / 3;
  at::parallel_for(0, nb, 16, [&](int64_t a, int64_t b) {
    for (int64_t i = a; i < b; ++i) rows_block<3>(X, W, O, M, K, N, i * 3);
  });
  for (int64_t n = nb * 3; n < N; ++n) rows_block<1>(X, W, O, M, K, N, n);
  return out;
}
'''


def cpp_kernels() -> Any:
    from torch.utils.cpp_extension import load_inline

    return load_inline("slime_bench_small_m", cpp_sources=CPP,
                       functions=["small_m_linear", "small_m_linear_blocked"],
                       extra_cflags=["-O3", "-mavx2", "-mfma"])


def mul_sum(w: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    return (w[:, None, :] * x[None, :, :]).sum(-1).t()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=8)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--cpp", action="store_true", help="also time a plain AVX2 C++ kernel")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    big = torch.randn(135_000_000)
    out: dict[str, object] = {"threads": a.threads, "rows": a.rows,
                              "sum_540MB_GBps": big.numel() * 4 / 1e9 / per_call(big.sum, 5)}
    del big
    compiled = torch.compile(mul_sum, dynamic=False)
    kernels = cpp_kernels() if a.cpp else None
    # SmolLM2-135M: gate/up [3072, 576] (fused), down [576, 1536], LM head [49152, 576]
    for n, k in [(3072, 576), (576, 1536), (49152, 576)]:
        w, x = torch.randn(n, k), torch.randn(a.rows, k)
        gb = n * k * 4 / 1e9
        reps = 20 if n > 10000 else 200
        row: dict[str, float] = {}
        methods: list[tuple[str, Callable[..., object]]] = [
            ("x_Wt", lambda w, x: F.linear(x, w)), ("W_xt_t", lambda w, x: (w @ x.t()).t()),
            ("one_mv", lambda w, x: torch.mv(w, x[0])), ("mul_sum_compiled", compiled)]
        if kernels is not None:
            methods += [("cpp_avx2", lambda w, x: kernels.small_m_linear(x, w)),
                        ("cpp_avx2_blocked",
                         lambda w, x: kernels.small_m_linear_blocked(x, w))]
        for name, method in methods:
            fn = functools.partial(method, w, x)
            s = per_call(fn, reps)
            row[f"{name}_ms"] = round(s * 1e3, 3)
            row[f"{name}_GBps"] = round(gb / s, 1)
        out[f"W{n}x{k}"] = row
    print(json.dumps(out))


if __name__ == "__main__":
    main()
