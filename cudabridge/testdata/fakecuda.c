// fakecuda.c: a stand-in for libcuda.so.1, for TestBindingAgainstCFake.
//
// It exports the driver API functions cudabridge binds, with the real
// signatures, and checks what the real driver would need: a context made
// current on the calling thread (contexts are thread-local here too), device
// pointers that are live allocations, copies from and to page-locked host
// memory, the JIT option arrays, launch dimensions, and kernel parameters
// passed as void** pointing at each value. Its "kernels" are model.cu's,
// compiled for the host, so a batch through the real purego binding must
// give the reference's outputs. Streams report CUDA_ERROR_NOT_READY twice before
// done, to exercise the polling.
//
// Build: cc -shared -fPIC -O2 -ffp-contract=off -o libcuda.so.1 fakecuda.c
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
typedef int CUdevice;
typedef void *CUcontext;
typedef void *CUmodule;
typedef void *CUfunction;
typedef void *CUstream;
typedef unsigned long long CUdeviceptr;
typedef void *CUgraph;
typedef void *CUgraphExec;

enum { MAXALLOC = 256 };
static struct alloc { char *p; size_t n; int host; } allocs[MAXALLOC];

static int inited, retained, ctx_token, module_token, stream_token, streams, modules;
static __thread CUcontext current;
static int not_ready; // queries left that answer CUDA_ERROR_NOT_READY
static int launches;

static int has_ctx(void) { return inited && retained > 0 && current == (CUcontext)&ctx_token; }
#define NEED_CTX \
  if (!has_ctx()) return 201 /* CUDA_ERROR_INVALID_CONTEXT */

static struct alloc *find(const void *p, size_t n, int host) {
  for (int i = 0; i < MAXALLOC; i++) {
    struct alloc *a = &allocs[i];
    if (a->p && a->host == host && (const char *)p >= a->p && (const char *)p + n <= a->p + a->n) return a;
  }
  return NULL;
}

static CUresult add(void **out, size_t n, int host) {
  if (n == 0 || n > ((size_t)1 << 30)) return 1;
  for (int i = 0; i < MAXALLOC; i++) {
    if (!allocs[i].p) {
      allocs[i].p = calloc(1, n);
      if (!allocs[i].p) return 2;
      allocs[i].n = n;
      allocs[i].host = host;
      *out = allocs[i].p;
      return 0;
    }
  }
  return 2; // CUDA_ERROR_OUT_OF_MEMORY
}

static CUresult drop(void *p, int host) {
  for (int i = 0; i < MAXALLOC; i++) {
    if (allocs[i].p == p && allocs[i].host == host) {
      free(allocs[i].p);
      allocs[i].p = NULL;
      return 0;
    }
  }
  return 1;
}

// Graphs: a capture records the launches on the stream (their kernel,
// grid and parameter values) instead of running them; a graph and an
// executable graph are copies of such a recording, run in order by
// cuGraphLaunch.
enum { MAXNODES = 32, MAXGRAPHS = 64, MAXPARAMS = 12 };
struct node { int id; long long threads; long long vals[MAXPARAMS]; };
struct recording { int used; int n; struct node nodes[MAXNODES]; };
static struct recording graphs[MAXGRAPHS], execs[MAXGRAPHS], capture;
static int capturing, graph_launches;
int fakecuda_graph_launches(void) { return graph_launches; }

// fakecuda_live: what is still allocated or held, for the leak check.
int fakecuda_live(void) {
  int n = retained + streams + modules + capturing;
  for (int i = 0; i < MAXGRAPHS; i++) n += graphs[i].used + execs[i].used;
  for (int i = 0; i < MAXALLOC; i++) n += allocs[i].p != NULL;
  return n;
}

// fakecuda_launches: kernel launches so far.
int fakecuda_launches(void) { return launches; }

CUresult cuInit(unsigned int flags) {
  if (flags != 0) return 1;
  inited = 1;
  return 0;
}
CUresult cuDriverGetVersion(int *v) {
  *v = 12040;
  return 0;
}
CUresult cuDeviceGetCount(int *n) {
  if (!inited) return 3; // CUDA_ERROR_NOT_INITIALIZED
  *n = 1;
  return 0;
}
CUresult cuDeviceGet(CUdevice *d, int ordinal) {
  if (ordinal != 0) return 101; // CUDA_ERROR_INVALID_DEVICE
  *d = 0;
  return 0;
}
CUresult cuDeviceGetName(char *name, int len, CUdevice d) {
  if (d != 0 || len < 16) return 1;
  snprintf(name, (size_t)len, "Fake C GPU %d", d);
  return 0;
}
CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice d) {
  if (d != 0) return 101;
  *bytes = (size_t)80 << 30;
  return 0;
}
CUresult cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d) {
  if (d != 0) return 101;
  retained++;
  *c = (CUcontext)&ctx_token;
  return 0;
}
CUresult cuDevicePrimaryCtxRelease_v2(CUdevice d) {
  if (d != 0 || retained == 0) return 201;
  retained--;
  return 0;
}
CUresult cuDevicePrimaryCtxReset_v2(CUdevice d) { return d == 0 ? 0 : 101; }
CUresult cuCtxSetCurrent(CUcontext c) {
  current = c;
  return 0;
}

// cuModuleLoadDataEx wants the error log, its size, the info log and its
// size, in that order; an image holding FAIL_JIT fails with a log.
CUresult cuModuleLoadDataEx(CUmodule *m, const void *image, unsigned int n, int *options, void **values) {
  NEED_CTX;
  if (n != 4 || options[0] != 5 || options[1] != 6 || options[2] != 3 || options[3] != 4) return 1;
  char *errlog = values[0], *infolog = values[2];
  size_t errn = (size_t)(uintptr_t)values[1], infon = (size_t)(uintptr_t)values[3];
  if (!errlog || !infolog || errn < 64 || infon < 64) return 1;
  const char *ptx = image;
  if (strstr(ptx, "FAIL_JIT")) {
    int w = snprintf(errlog, errn, "ptxas fatal   : fake JIT refused the image");
    values[1] = (void *)(uintptr_t)(w + 1);
    return 218; // CUDA_ERROR_INVALID_PTX
  }
  if (!strstr(ptx, ".entry bytenet_dense(")) return 200; // CUDA_ERROR_INVALID_IMAGE
  int w = snprintf(infolog, infon, "fake JIT: ok");
  values[3] = (void *)(uintptr_t)(w + 1);
  modules++;
  *m = (CUmodule)&module_token;
  return 0;
}
CUresult cuModuleUnload(CUmodule m) {
  NEED_CTX;
  if (m != (CUmodule)&module_token || modules == 0) return 400;
  modules--;
  return 0;
}

static int kernel_ids[8] = {1, 2, 3, 4, 5, 6, 7, 8};
CUresult cuModuleGetFunction(CUfunction *f, CUmodule m, const char *name) {
  NEED_CTX;
  if (m != (CUmodule)&module_token) return 400;
  if (!strcmp(name, "bytenet_embed_pool")) *f = &kernel_ids[0];
  else if (!strcmp(name, "bytenet_dense")) *f = &kernel_ids[1];
  else if (!strcmp(name, "bytenet_step")) *f = &kernel_ids[2];
  else if (!strcmp(name, "bytenet_gen_pool")) *f = &kernel_ids[3];
  else if (!strcmp(name, "bytenet_gen_mean")) *f = &kernel_ids[4];
  else if (!strcmp(name, "bytenet_gen_feed")) *f = &kernel_ids[5];
  else if (!strcmp(name, "bytenet_gen_scatter")) *f = &kernel_ids[6];
  else if (!strcmp(name, "bytenet_gen_gather")) *f = &kernel_ids[7];
  else return 500; // CUDA_ERROR_NOT_FOUND
  return 0;
}

CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t n) {
  NEED_CTX;
  void *q;
  CUresult r = add(&q, n, 0);
  if (r == 0) *p = (CUdeviceptr)(uintptr_t)q;
  return r;
}
CUresult cuMemFree_v2(CUdeviceptr p) {
  NEED_CTX;
  return drop((void *)(uintptr_t)p, 0);
}
CUresult cuMemAllocHost_v2(void **p, size_t n) {
  NEED_CTX;
  return add(p, n, 1);
}
CUresult cuMemFreeHost(void *p) {
  NEED_CTX;
  return drop(p, 1);
}

CUresult cuStreamCreate(CUstream *s, unsigned int flags) {
  NEED_CTX;
  if (flags != 1) return 1; // cudabridge asks for CU_STREAM_NON_BLOCKING
  streams++;
  *s = (CUstream)&stream_token;
  return 0;
}
CUresult cuStreamDestroy_v2(CUstream s) {
  NEED_CTX;
  if (s != (CUstream)&stream_token || streams == 0) return 400;
  streams--;
  return 0;
}
CUresult cuStreamQuery(CUstream s) {
  NEED_CTX;
  if (s != (CUstream)&stream_token) return 400;
  if (capturing) return 900; // CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED
  if (not_ready > 0) {
    not_ready--;
    return 600; // CUDA_ERROR_NOT_READY
  }
  return 0;
}

// The copies run at once (the fake's stream is always caught up); the
// host side must be page-locked memory.
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n, CUstream s) {
  NEED_CTX;
  if (s != (CUstream)&stream_token || capturing || !find((void *)(uintptr_t)dst, n, 0) || !find(src, n, 1)) return 1;
  memcpy((void *)(uintptr_t)dst, src, n);
  not_ready = 2;
  return 0;
}
CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t n, CUstream s) {
  NEED_CTX;
  if (s != (CUstream)&stream_token || capturing || !find((void *)(uintptr_t)src, n, 0) || !find(dst, n, 1)) return 1;
  memcpy(dst, (void *)(uintptr_t)src, n);
  not_ready = 2;
  return 0;
}

// The kernels: model.cu itself, built for the host (BN_HOST), run once per
// "thread" with bn_host_index set. So the tests run the very source the
// PTX is made from.
static long long bn_host_index;
#define BN_HOST 1
#include "../model.cu"

#define P(i, T) (*(T *)params[i])

// How many parameters each kernel (by id) takes: model.cu's signatures.
static const int kernel_params[8] = {6, 8, 10, 8, 5, 10, 6, 5};
static CUresult run_kernel(int id, long long threads, void **params);

CUresult cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx, unsigned int by,
                        unsigned int bz, unsigned int shared, CUstream s, void **params, void **extra) {
  NEED_CTX;
  /* The bridge launches blocks of launchBlockThreads (driver.go): a grid
     passed where the block goes shows. */
  if (s != (CUstream)&stream_token || gx == 0 || gy != 1 || gz != 1 || bx != 128 || by != 1 || bz != 1 ||
      shared != 0 || extra != NULL || params == NULL)
    return 1;
  long long threads = (long long)gx * bx;
  int id = *(int *)f;
  if (id < 1 || id > 8) return 400;
  if (capturing) {
    if (capture.n == MAXNODES) return 2;
    struct node *nd = &capture.nodes[capture.n++];
    nd->id = id;
    nd->threads = threads;
    for (int i = 0; i < kernel_params[id - 1]; i++) nd->vals[i] = *(long long *)params[i];
    return 0;
  }
  launches++;
  not_ready = 2;
  return run_kernel(id, threads, params);
}

static CUresult run_kernel(int id, long long threads, void **params) {
  for (long long t = 0; t < threads; t++) {
    bn_host_index = t;
    switch (id) {
    case 1:
      bytenet_embed_pool(P(0, const unsigned char *), P(1, const int *), P(2, const float *), P(3, float *), P(4, long long),
                         P(5, long long));
      break;
    case 2:
      bytenet_dense(P(0, const float *), P(1, const float *), P(2, const float *), P(3, float *), P(4, long long), P(5, long long),
                    P(6, long long), P(7, long long));
      break;
    case 3:
      bytenet_step(P(0, const float *), P(1, const float *), P(2, const float *), P(3, const float *), P(4, const float *),
                   P(5, const float *), P(6, float *), P(7, unsigned char *), P(8, long long), P(9, long long));
      break;
    case 4:
      bytenet_gen_pool(P(0, const unsigned char *), P(1, const int *), P(2, const int *), P(3, const int *), P(4, const int *),
                       P(5, const float *), P(6, float *), P(7, long long));
      break;
    case 5:
      bytenet_gen_mean(P(0, const float *), P(1, const int *), P(2, const int *), P(3, float *), P(4, long long));
      break;
    case 6:
      bytenet_gen_feed(P(0, const int *), P(1, const int *), P(2, const float *), P(3, const float *), P(4, const float *),
                       P(5, const float *), P(6, const float *), P(7, float *), P(8, long long), P(9, long long));
      break;
    case 7:
      bytenet_gen_scatter(P(0, const float *), P(1, const int *), P(2, float *), P(3, long long), P(4, long long),
                          P(5, long long));
      break;
    case 8:
      bytenet_gen_gather(P(0, const float *), P(1, const int *), P(2, float *), P(3, long long), P(4, long long));
      break;
    default:
      return 400;
    }
  }
  return 0;
}

CUresult cuGetErrorName(CUresult r, const char **s) {
  switch (r) {
  case 0: *s = "CUDA_SUCCESS"; return 0;
  case 1: *s = "CUDA_ERROR_INVALID_VALUE"; return 0;
  case 201: *s = "CUDA_ERROR_INVALID_CONTEXT"; return 0;
  case 218: *s = "CUDA_ERROR_INVALID_PTX"; return 0;
  case 600: *s = "CUDA_ERROR_NOT_READY"; return 0;
  }
  return 1;
}
CUresult cuGetErrorString(CUresult r, const char **s) {
  switch (r) {
  case 1: *s = "invalid argument"; return 0;
  case 201: *s = "invalid device context"; return 0;
  case 218: *s = "a PTX JIT compilation failed"; return 0;
  }
  return 1;
}

static struct recording *slot(struct recording *rs) {
  for (int i = 0; i < MAXGRAPHS; i++)
    if (!rs[i].used) return &rs[i];
  return NULL;
}
static int live_recording(struct recording *rs, void *p) {
  struct recording *r = p;
  return r >= rs && r < rs + MAXGRAPHS && r->used;
}

CUresult cuStreamBeginCapture_v2(CUstream s, int mode) {
  NEED_CTX;
  if (s != (CUstream)&stream_token || capturing || mode != 2 /* CU_STREAM_CAPTURE_MODE_RELAXED */) return 1;
  capturing = 1;
  capture.n = 0;
  return 0;
}
CUresult cuStreamEndCapture(CUstream s, CUgraph *g) {
  NEED_CTX;
  if (s != (CUstream)&stream_token || !capturing) return 1;
  capturing = 0;
  struct recording *r = slot(graphs);
  if (!r) return 2;
  *r = capture;
  r->used = 1;
  *g = r;
  return 0;
}
CUresult cuGraphInstantiateWithFlags(CUgraphExec *e, CUgraph g, unsigned long long flags) {
  NEED_CTX;
  if (!live_recording(graphs, g) || flags != 0) return 400;
  struct recording *r = slot(execs);
  if (!r) return 2;
  *r = *(struct recording *)g;
  *e = r;
  return 0;
}
CUresult cuGraphLaunch(CUgraphExec e, CUstream s) {
  NEED_CTX;
  if (!live_recording(execs, e) || s != (CUstream)&stream_token || capturing) return 400;
  struct recording *r = e;
  graph_launches++;
  not_ready = 2;
  for (int i = 0; i < r->n; i++) {
    void *ptrs[MAXPARAMS];
    for (int k = 0; k < MAXPARAMS; k++) ptrs[k] = &r->nodes[i].vals[k];
    CUresult res = run_kernel(r->nodes[i].id, r->nodes[i].threads, ptrs);
    if (res != 0) return res;
  }
  return 0;
}
CUresult cuGraphExecDestroy(CUgraphExec e) {
  NEED_CTX;
  if (!live_recording(execs, e)) return 400;
  ((struct recording *)e)->used = 0;
  return 0;
}
CUresult cuGraphDestroy(CUgraph g) {
  NEED_CTX;
  if (!live_recording(graphs, g)) return 400;
  ((struct recording *)g)->used = 0;
  return 0;
}
