"""A stand-in for libcuda.so.1, compiled from C on the spot: every driver API call the NV driver makes, counted (and, when
asked, logged in order with its kernel and arguments), device memory as host memory, kernels that do nothing. It measures
the Python work of the NV launch path without a GPU (bench/nv_launch.py) and records the graph calls (test_nv_driver.py)."""
from __future__ import annotations
import ctypes, hashlib, os, shutil, subprocess, tempfile

SOURCE = r"""
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
typedef int CUresult;
typedef struct { void *func; unsigned grid[3], block[3], shared; void **params; void **extra; void *kern, *ctx; } NodeParams;

#define MAXF 64
static const char *fnames[MAXF]; static long fcounts[MAXF]; static int nf;
static int logging; static char logbuf[1 << 22]; static size_t loglen;
static void say(const char *fmt, const char *a, const char *b) {
  if (logging && loglen + 256 < sizeof logbuf) loglen += snprintf(logbuf + loglen, 256, fmt, a, b);
}
static void hit(const char *name) {   /* __func__ strings have one address each: compared as pointers */
  int i = 0;
  while (i < nf && fnames[i] != name) i++;
  if (i == nf && nf < MAXF) fnames[nf++] = name;
  fcounts[i]++;
  say("%s%s\n", name, "");
}
#define HIT hit(__func__)
static void say_args(const char *what, const char *kernel, void **params) {   /* the driver NULL-terminates its pointer array */
  if (!logging) return;
  say("%s %s", what, kernel);
  for (int i = 0; params && params[i] && i < 16; i++) loglen += snprintf(logbuf + loglen, 32, " %llu", (unsigned long long)*(uint64_t *)params[i]);
  say("\n%s%s", "", "");
}

long fake_count(const char *name) { for (int i = 0; i < nf; i++) if (!strcmp(fnames[i], name)) return fcounts[i]; return 0; }
long fake_total(void) { long t = 0; for (int i = 0; i < nf; i++) t += fcounts[i]; return t; }
void fake_reset(int log) { for (int i = 0; i < nf; i++) fcounts[i] = 0; loglen = 0; logbuf[0] = 0; logging = log; }
const char *fake_log(void) { logbuf[loglen] = 0; return logbuf; }

CUresult cuInit(unsigned f) { HIT; return 0; }
CUresult cuGetErrorString(CUresult e, const char **s) { HIT; *s = "fake error"; return 0; }
CUresult cuDeviceGetCount(int *n) { HIT; *n = 2; return 0; }
CUresult cuDriverGetVersion(int *v) { HIT; *v = 13000; return 0; }
CUresult cuDeviceGet(int *d, int i) { HIT; *d = i; return 0; }
CUresult cuDeviceGetName(char *s, int n, int d) { HIT; snprintf(s, n, "fake GPU %d", d); return 0; }
CUresult cuDeviceGetAttribute(int *v, int attr, int d) { HIT; *v = attr == 75 ? 9 : 0; return 0; }
static int ctxs[8];
CUresult cuDevicePrimaryCtxRetain(void **c, int d) { HIT; *c = &ctxs[d & 7]; return 0; }
CUresult cuCtxSetCurrent(void *c) { HIT; return 0; }
CUresult cuCtxSynchronize(void) { HIT; return 0; }
static int handles[1 << 12]; static int nhandles;
static void *handle(void) { return &handles[nhandles++ & 4095]; }
CUresult cuStreamCreate(void **s, unsigned f) { HIT; *s = handle(); return 0; }
CUresult cuStreamSynchronize(void *s) { HIT; return 0; }
CUresult cuEventCreate(void **e, unsigned f) { HIT; *e = handle(); return 0; }
CUresult cuEventRecord(void *e, void *s) { HIT; return 0; }
CUresult cuEventSynchronize(void *e) { HIT; return 0; }
CUresult cuEventElapsedTime(float *ms, void *a, void *b) { HIT; *ms = 0.001f; return 0; }
CUresult cuMemAlloc_v2(uint64_t *p, size_t n) { HIT; *p = (uint64_t)calloc(1, n ? n : 1); return *p ? 0 : 2; }
CUresult cuMemFree_v2(uint64_t p) { HIT; free((void *)p); return 0; }
CUresult cuMemHostAlloc(void **p, size_t n, unsigned f) { HIT; *p = malloc(n); return *p ? 0 : 2; }
CUresult cuMemFreeHost(void *p) { HIT; free(p); return 0; }
CUresult cuMemcpyHtoDAsync_v2(uint64_t d, const void *h, size_t n, void *s) { HIT; memcpy((void *)d, h, n); return 0; }
CUresult cuMemcpyDtoHAsync_v2(void *h, uint64_t d, size_t n, void *s) { HIT; memcpy(h, (void *)d, n); return 0; }
CUresult cuMemcpyHtoD_v2(uint64_t d, const void *h, size_t n) { HIT; memcpy((void *)d, h, n); return 0; }
CUresult cuMemcpyDtoH_v2(void *h, uint64_t d, size_t n) { HIT; memcpy(h, (void *)d, n); return 0; }
CUresult cuMemcpyPeerAsync(uint64_t d, void *dc, uint64_t s, void *sc, size_t n, void *st) { HIT; memcpy((void *)d, (void *)s, n); return 0; }
CUresult cuMemcpyPeer(uint64_t d, void *dc, uint64_t s, void *sc, size_t n) { HIT; memcpy((void *)d, (void *)s, n); return 0; }
CUresult cuModuleLoadDataEx(void **m, const void *img, unsigned n, int *o, void **v) { HIT; *m = handle(); return 0; }
CUresult cuModuleGetFunction(void **f, void *m, const char *name) { HIT; *f = strdup(name); return 0; }
CUresult cuModuleUnload(void *m) { HIT; return 0; }
CUresult cuFuncGetAttribute(int *v, int attr, void *f) { HIT; *v = 0; return 0; }
CUresult cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz, unsigned shm,
                        void *s, void **params, void **extra) { HIT; say_args("  launch", (const char *)f, params); return 0; }

/* graphs: a graph is a list of kernel nodes, each keeping a copy of its arguments; launching one logs its nodes' launches */
#define MAXN 4096
typedef struct { const char *kernel; uint64_t args[17]; int nargs; } Node;
static Node nodes[MAXN]; static int nnodes;
typedef struct { int first, count; } Graph;
static Graph graphs[256]; static int ngraphs;
static void keep(Node *n, const NodeParams *p) {
  n->kernel = (const char *)p->func; n->nargs = 0;
  for (int i = 0; p->params && p->params[i] && i < 16; i++) n->args[n->nargs++] = *(uint64_t *)p->params[i];
}
CUresult cuGraphCreate(void **g, unsigned f) { HIT; Graph *gr = &graphs[ngraphs++ & 255]; gr->first = nnodes; gr->count = 0; *g = gr; return 0; }
CUresult cuGraphAddKernelNode_v2(void **node, void *g, void **deps, size_t ndeps, const NodeParams *p) {
  HIT; Graph *gr = g; Node *n = &nodes[nnodes++ % MAXN]; keep(n, p); gr->count++; *node = n;
  say_args("  node", n->kernel, p->params); return 0;
}
CUresult cuGraphInstantiateWithFlags(void **e, void *g, unsigned long long f) { HIT; *e = g; return 0; }
CUresult cuGraphExecKernelNodeSetParams_v2(void *e, void *node, const NodeParams *p) { HIT; keep(node, p); say_args("  set", ((Node *)node)->kernel, p->params); return 0; }
CUresult cuGraphLaunch(void *e, void *s) {
  HIT; Graph *g = e;
  for (int i = 0; i < g->count && logging; i++) {
    Node *n = &nodes[(g->first + i) % MAXN];
    say("  run %s", n->kernel, "");
    for (int a = 0; a < n->nargs; a++) loglen += snprintf(logbuf + loglen, 32, " %llu", (unsigned long long)n->args[a]);
    say("\n%s%s", "", "");
  }
  return 0;
}
CUresult cuGraphExecDestroy(void *e) { HIT; return 0; }
CUresult cuGraphDestroy(void *g) { HIT; return 0; }
"""

def build(where: str | None = None) -> str:
  """The stand-in compiled into a shared library (cached by its source's hash); the path. Needs a C compiler."""
  cc = next((c for c in ("cc", "gcc", "clang") if shutil.which(c)), None)
  if cc is None: raise RuntimeError("fake libcuda: no C compiler (cc, gcc or clang) on this machine")
  where = where or os.path.join(tempfile.gettempdir(), "tinycore-fake-libcuda")
  os.makedirs(where, exist_ok=True)
  path = os.path.join(where, f"libcuda-fake-{hashlib.sha256(SOURCE.encode()).hexdigest()[:12]}.so")
  if not os.path.exists(path):
    src = path[:-3] + ".c"
    with open(src, "w") as f: f.write(SOURCE)
    subprocess.run([cc, "-O2", "-shared", "-fPIC", "-o", path + ".tmp", src], check=True, capture_output=True)
    os.replace(path + ".tmp", path)
  return path

def load(where: str | None = None) -> ctypes.CDLL:
  lib = ctypes.CDLL(build(where))
  lib.fake_count.restype, lib.fake_total.restype, lib.fake_log.restype = ctypes.c_long, ctypes.c_long, ctypes.c_char_p
  lib.fake_count.argtypes = [ctypes.c_char_p]
  return lib

def install(lib: ctypes.CDLL) -> None:
  """The NV driver uses lib as its libcuda from now on, in this process (and every NV instance opened after)."""
  from tinygrad_nv import driver
  driver._cuda = lib
