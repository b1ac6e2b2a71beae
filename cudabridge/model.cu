// bytenet: the kernels of cudabridge's model (see model.go for the math and
// the CPU reference, which computes exactly the same thing).
//
// Every output element is computed by one thread with the same sequential
// loop order as the Go reference, in float32, with explicitly rounded
// multiplies and adds (mul.rn/add.rn: never fused into an FMA, whatever the
// compiler's contraction flags), so the GPU and the CPU agree bit for bit.
//
// The file is self-contained: it needs no CUDA headers, so clang compiles it
// without the CUDA toolkit (regenerate the checked-in PTX with `make ptx`):
//
//   clang -x cuda --cuda-device-only --cuda-gpu-arch=sm_80 -nocudainc -nocudalib -O2 -ffp-contract=off -S -o model.ptx model.cu
//
// nvcc works too: nvcc -ptx -arch=sm_80 -fmad=false -o model.ptx model.cu
//
// Every scalar parameter is a 64-bit integer so that every kernel parameter
// is one 8-byte slot (cudabridge packs them that way).

// The model's dimensions: model.go's constants, checked by a test.
#define BN_VOCAB 256  // byte vocabulary
#define BN_EMBED 64   // embedding width (D)
#define BN_HIDDEN 64  // hidden width (H)
#define BN_CONT 8     // continuation bytes (T)
#define BN_PRINT_LO 32  // the continuation picks among printable bytes...
#define BN_PRINT_HI 126 // ...32 to 126 inclusive

#if defined(BN_HOST)
// The host build: testdata/fakecuda.c, the tests' C stand-in for
// libcuda.so.1, includes this file and runs each kernel once per "thread",
// setting bn_host_index (plain C, float arithmetic, no contraction).
#define BN_EXTERN_C
#define __global__
#define BN_INDEX() bn_host_index
#define BN_MUL(a, b) ((a) * (b))
#define BN_ADD(a, b) ((a) + (b))
#define BN_DIV(a, b) ((a) / (b))
#elif defined(__clang__)
#define BN_EXTERN_C extern "C"
#ifndef __global__
#define __global__ __attribute__((global))
#endif
#define BN_INDEX() ((long long)__nvvm_read_ptx_sreg_ctaid_x() * __nvvm_read_ptx_sreg_ntid_x() + __nvvm_read_ptx_sreg_tid_x())
#define BN_MUL(a, b) __nvvm_mul_rn_f((a), (b))
#define BN_ADD(a, b) __nvvm_add_rn_f((a), (b))
#define BN_DIV(a, b) __nvvm_div_rn_f((a), (b))
#else // nvcc
#define BN_EXTERN_C extern "C"
#define BN_INDEX() ((long long)blockIdx.x * blockDim.x + threadIdx.x)
#define BN_MUL(a, b) __fmul_rn((a), (b))
#define BN_ADD(a, b) __fadd_rn((a), (b))
#define BN_DIV(a, b) __fdiv_rn((a), (b))
#endif

// bytenet_embed_pool: p[i][d] = mean over t < len[i] of E[x[i][t]][d].
// x is n rows of lpad bytes (padded to the batch's longest input); the
// padding is never read. An empty input pools to zeros.
BN_EXTERN_C __global__ void bytenet_embed_pool(const unsigned char *x, const int *len,
                                              const float *E, float *p, long long n,
                                              long long lpad) {
  long long idx = BN_INDEX();
  if (idx >= n * BN_EMBED) return;
  long long i = idx / BN_EMBED;
  long long d = idx % BN_EMBED;
  long long m = len[i];
  float s = 0.0f;
  for (long long t = 0; t < m; t++) {
    s = BN_ADD(s, E[(long long)x[i * lpad + t] * BN_EMBED + d]);
  }
  if (m > 0) s = BN_DIV(s, (float)m);
  p[idx] = s;
}

// bytenet_dense: out[i][j] = b[j] + sum over k of W[j][k]*in[i][k], summed
// in increasing k, then ReLU when relu is not 0.
BN_EXTERN_C __global__ void bytenet_dense(const float *in, const float *W, const float *b,
                                         float *out, long long n, long long in_dim,
                                         long long out_dim, long long relu) {
  long long idx = BN_INDEX();
  if (idx >= n * out_dim) return;
  long long i = idx / out_dim;
  long long j = idx % out_dim;
  const float *w = W + j * in_dim;
  const float *v = in + i * in_dim;
  float a = b[j];
  for (long long k = 0; k < in_dim; k++) {
    a = BN_ADD(a, BN_MUL(w[k], v[k]));
  }
  if (relu != 0 && !(a > 0.0f)) a = 0.0f;
  out[idx] = a;
}

// bytenet_step: one step of the greedy continuation. Every thread of item
// i picks the same byte c, the printable byte with the highest logit in
// o[i] (ties: the lowest byte), and computes one element of the next state:
// hn[i][j] = relu(BH[j] + sum_k WH[j][k]*h[i][k] + sum_k WX[j][k]*E[c][k]).
// Thread j == 0 records c as byte `step` of item i's continuation.
BN_EXTERN_C __global__ void bytenet_step(const float *o, const float *h, const float *E,
                                        const float *WH, const float *WX, const float *BH,
                                        float *hn, unsigned char *cont, long long n,
                                        long long step) {
  long long idx = BN_INDEX();
  if (idx >= n * BN_HIDDEN) return;
  long long i = idx / BN_HIDDEN;
  long long j = idx % BN_HIDDEN;
  const float *oi = o + i * BN_VOCAB;
  long long c = BN_PRINT_LO;
  float best = oi[BN_PRINT_LO];
  for (long long v = BN_PRINT_LO + 1; v <= BN_PRINT_HI; v++) {
    if (oi[v] > best) {
      best = oi[v];
      c = v;
    }
  }
  const float *wh = WH + j * BN_HIDDEN;
  const float *hi = h + i * BN_HIDDEN;
  float a = BH[j];
  for (long long k = 0; k < BN_HIDDEN; k++) {
    a = BN_ADD(a, BN_MUL(wh[k], hi[k]));
  }
  const float *wx = WX + j * BN_EMBED;
  const float *e = E + c * BN_EMBED;
  for (long long k = 0; k < BN_EMBED; k++) {
    a = BN_ADD(a, BN_MUL(wx[k], e[k]));
  }
  if (!(a > 0.0f)) a = 0.0f;
  hn[idx] = a;
  if (j == 0) cont[i * BN_CONT + step] = (unsigned char)c;
}

// The generation kernels: bytenet run one byte at a time (see gen.go for
// the generation function and gengpu.go for the launches). A sequence's
// state lives in two tables indexed by its row: pool (EMBED floats, the
// sum of its prompt's embeddings) and s (HIDDEN floats, the recurrent
// state once the prompt is fed). Integer arrays are int; an item's row,
// token and lengths come from them, so one launch serves a whole step.

// bytenet_gen_pool: adds item i's prompt bytes x[off[i]..off[i]+len[i])
// to its pool row, in increasing position, starting from zeros when
// fresh[i] is not 0 (a sequence begun afresh).
BN_EXTERN_C __global__ void bytenet_gen_pool(const unsigned char *x, const int *off, const int *len, const int *row,
                                            const int *fresh, const float *E, float *pool, long long n) {
  long long idx = BN_INDEX();
  if (idx >= n * BN_EMBED) return;
  long long i = idx / BN_EMBED;
  long long d = idx % BN_EMBED;
  float *pr = pool + (long long)row[i] * BN_EMBED;
  float a = fresh[i] != 0 ? 0.0f : pr[d];
  const unsigned char *xi = x + off[i];
  for (long long t = 0; t < len[i]; t++) {
    a = BN_ADD(a, E[(long long)xi[t] * BN_EMBED + d]);
  }
  pr[d] = a;
}

// bytenet_gen_mean: p[i][d] = pool[row[i]][d] / plen[i], the pooled mean
// of a prompt fed to its end (then two bytenet_dense make s).
BN_EXTERN_C __global__ void bytenet_gen_mean(const float *pool, const int *row, const int *plen, float *p, long long n) {
  long long idx = BN_INDEX();
  if (idx >= n * BN_EMBED) return;
  long long i = idx / BN_EMBED;
  long long d = idx % BN_EMBED;
  p[idx] = BN_DIV(pool[(long long)row[i] * BN_EMBED + d], (float)plen[i]);
}

// bytenet_gen_feed: feeds item base+i its byte tok[base+i]:
// out[i][j] = relu(BH[j] + sum_k WH[j][k]*s[row[base+i]][k]
// + sum_k WX[j][k]*E[tok[base+i]][k]), the continuation's recurrence.
// bytenet_gen_scatter then writes out back to the rows.
BN_EXTERN_C __global__ void bytenet_gen_feed(const int *tok, const int *row, const float *s, const float *E,
                                            const float *WH, const float *WX, const float *BH, float *out,
                                            long long base, long long n) {
  long long idx = BN_INDEX();
  if (idx >= n * BN_HIDDEN) return;
  long long i = idx / BN_HIDDEN;
  long long j = idx % BN_HIDDEN;
  const float *si = s + (long long)row[base + i] * BN_HIDDEN;
  const float *e = E + (long long)tok[base + i] * BN_EMBED;
  const float *wh = WH + j * BN_HIDDEN;
  float a = BH[j];
  for (long long k = 0; k < BN_HIDDEN; k++) {
    a = BN_ADD(a, BN_MUL(wh[k], si[k]));
  }
  const float *wx = WX + j * BN_EMBED;
  for (long long k = 0; k < BN_EMBED; k++) {
    a = BN_ADD(a, BN_MUL(wx[k], e[k]));
  }
  if (!(a > 0.0f)) a = 0.0f;
  out[idx] = a;
}

// bytenet_gen_scatter: dst[row[base+i]][d] = src[i][d], rows of dim floats.
BN_EXTERN_C __global__ void bytenet_gen_scatter(const float *src, const int *row, float *dst, long long base, long long n,
                                               long long dim) {
  long long idx = BN_INDEX();
  if (idx >= n * dim) return;
  long long i = idx / dim;
  long long d = idx % dim;
  dst[(long long)row[base + i] * dim + d] = src[idx];
}

// bytenet_gen_gather: dst[i][d] = src[row[i]][d], rows of dim floats (the
// states to pick from, for one bytenet_dense with WO).
BN_EXTERN_C __global__ void bytenet_gen_gather(const float *src, const int *row, float *dst, long long n, long long dim) {
  long long idx = BN_INDEX();
  if (idx >= n * dim) return;
  long long i = idx / dim;
  long long d = idx % dim;
  dst[idx] = src[(long long)row[i] * dim + d];
}
