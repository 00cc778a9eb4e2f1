/* rccl-tuner-probe: ask a tuner plugin what it would choose, as RCCL asks it (imagebuild).
 *
 * usage: rccl-tuner-probe PLUGIN.so COLLECTIVE BYTES[,BYTES...] [NODES RANKS]
 *   COLLECTIVE: broadcast, reduce, allgather, reducescatter or allreduce
 *   BYTES: one size, or several separated by commas: one communicator asks for each in turn
 *
 * Like RCCL 2.27 (src/plugin/tuner.cc, after NCCL's): dlopen the plugin, dlsym
 * ncclTunerPlugin_v4, init(nRanks, nNodes, logger, &context), then getCollInfo with a
 * collective cost table (algorithm x protocol, in microseconds; -1 = not available) and
 * take the cheapest entry, as topoGetAlgoInfo does. The plugin reads NCCL_TUNER_CONFIG_FILE
 * in init. No GPU and no RCCL are needed.
 *
 * The table's costs are a stand-in for RCCL's model (latency + bytes / bandwidth per
 * algorithm and protocol; CollNet, NVLS and PAT marked unavailable, as on AMD GPUs without
 * them): what the probe shows is which entry the plugin makes the cheapest, not RCCL's own
 * choice on a given machine.
 *
 * Prints one line per size:
 *   allreduce 1048576 bytes, 1 nodes, 8 ranks: model ring/simple -> chosen tree/ll channels 4
 * Exits 1 (naming the step) when the plugin does not load or a call fails.
 *
 * The v4 layout: NVIDIA/nccl src/include/plugin/tuner/tuner_v4.h
 * (https://github.com/NVIDIA/nccl/blob/51c58fd6b3bd4cc50c8ec18bfd707aab45f3354a/src/include/plugin/tuner/tuner_v4.h).
 */
#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NUM_ALGORITHMS 7 /* tree, ring, collnet_direct, collnet_chain, nvls, nvls_tree, pat */
#define NUM_PROTOCOLS 3  /* ll, ll128, simple */

static const char* const ALGORITHMS[NUM_ALGORITHMS] = {
    "tree", "ring", "collnet_direct", "collnet_chain", "nvls", "nvls_tree", "pat"};
static const char* const PROTOCOLS[NUM_PROTOCOLS] = {"ll", "ll128", "simple"};
/* ncclFunc_t: ncclFuncBroadcast = 0 ... ncclFuncAllReduce = 4 (nccl_common.h). */
static const char* const COLLECTIVES[] = {"broadcast", "reduce", "allgather", "reducescatter",
                                          "allreduce"};

typedef void (*logger_t)(int level, unsigned long flags, const char* file, int line,
                         const char* fmt, ...);
typedef struct {
  const char* name;
  int (*init)(size_t nRanks, size_t nNodes, logger_t logFunction, void** context);
  int (*getCollInfo)(void* context, int collType, size_t nBytes, int numPipeOps,
                     float** collCostTable, int numAlgo, int numProto, int regBuff,
                     int* nChannels);
  int (*destroy)(void* context);
} tuner_v4_t;

/* The plugin's log lines go to stderr when NCCL_DEBUG is set, as RCCL's would. */
static void logger(int level, unsigned long flags, const char* file, int line,
                   const char* fmt, ...) {
  (void)level; (void)flags; (void)file; (void)line;
  if (getenv("NCCL_DEBUG") == NULL) return;
  va_list args;
  va_start(args, fmt);
  vfprintf(stderr, fmt, args);
  va_end(args);
  fputc('\n', stderr);
}

/* Stand-in costs (us): latency + bytes / bandwidth; tree trades bandwidth for latency. */
static void model(float table[NUM_ALGORITHMS][NUM_PROTOCOLS], size_t bytes) {
  static const float latency[NUM_PROTOCOLS] = {6.0f, 9.0f, 25.0f};
  static const float bytes_per_us[NUM_PROTOCOLS] = {4000.0f, 20000.0f, 40000.0f};
  for (int a = 0; a < NUM_ALGORITHMS; a++)
    for (int p = 0; p < NUM_PROTOCOLS; p++) table[a][p] = -1.0f;
  for (int p = 0; p < NUM_PROTOCOLS; p++) {
    table[0][p] = latency[p] * 0.8f + (float)bytes / (bytes_per_us[p] * 0.7f);
    table[1][p] = latency[p] + (float)bytes / bytes_per_us[p];
  }
}

static void cheapest(float table[NUM_ALGORITHMS][NUM_PROTOCOLS], int* algo, int* proto) {
  *algo = *proto = -1;
  for (int a = 0; a < NUM_ALGORITHMS; a++)
    for (int p = 0; p < NUM_PROTOCOLS; p++)
      if (table[a][p] >= 0.0f && (*algo < 0 || table[a][p] < table[*algo][*proto])) {
        *algo = a;
        *proto = p;
      }
}

int main(int argc, char** argv) {
  if (argc != 4 && argc != 6) {
    fprintf(stderr, "usage: %s PLUGIN.so COLLECTIVE BYTES[,BYTES...] [NODES RANKS]\n", argv[0]);
    return 2;
  }
  int coll = -1;
  for (int i = 0; i < (int)(sizeof(COLLECTIVES) / sizeof(*COLLECTIVES)); i++)
    if (strcmp(argv[2], COLLECTIVES[i]) == 0) coll = i;
  enum { MAX_SIZES = 64 };
  size_t sizes[MAX_SIZES];
  int n_sizes = 0;
  int sizes_ok = 1;
  for (char* cursor = argv[3]; sizes_ok;) {
    char* end;
    sizes[n_sizes++] = strtoull(cursor, &end, 10);
    sizes_ok = end != cursor && (*end == '\0' || *end == ',');
    if (!sizes_ok || *end == '\0') break;
    cursor = end + 1;
    if (n_sizes == MAX_SIZES) sizes_ok = 0;
  }
  size_t nodes = argc == 6 ? strtoull(argv[4], NULL, 10) : 1;
  size_t ranks = argc == 6 ? strtoull(argv[5], NULL, 10) : 8;
  if (coll < 0 || !sizes_ok || nodes == 0 || ranks == 0) {
    fprintf(stderr, "rccl-tuner-probe: COLLECTIVE is one of broadcast, reduce, allgather, "
                    "reducescatter, allreduce; BYTES (up to 64, comma-separated), NODES and "
                    "RANKS are positive numbers\n");
    return 2;
  }
  void* handle = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (handle == NULL) {
    fprintf(stderr, "rccl-tuner-probe: dlopen(%s) failed: %s\n", argv[1], dlerror());
    return 1;
  }
  tuner_v4_t* tuner = (tuner_v4_t*)dlsym(handle, "ncclTunerPlugin_v4");
  if (tuner == NULL) {
    fprintf(stderr, "rccl-tuner-probe: %s exports no ncclTunerPlugin_v4: RCCL 2.27 would "
                    "not use it\n", argv[1]);
    return 1;
  }
  void* context = NULL;
  if (tuner->init(ranks, nodes, logger, &context) != 0) {
    fprintf(stderr, "rccl-tuner-probe: %s: init failed\n", tuner->name);
    return 1;
  }
  for (int i = 0; i < n_sizes; i++) {
    size_t bytes = sizes[i];
    float table[NUM_ALGORITHMS][NUM_PROTOCOLS];
    model(table, bytes);
    int model_algo, model_proto;
    cheapest(table, &model_algo, &model_proto);
    int channels = 0;
    /* RCCL passes the table as float** and the plugin casts it back to rows of
     * NUM_PROTOCOLS floats (NCCL src/enqueue.cc, updateCollCostTable). */
    if (tuner->getCollInfo(context, coll, bytes, 1, (float**)table, NUM_ALGORITHMS,
                           NUM_PROTOCOLS, 0, &channels) != 0) {
      fprintf(stderr, "rccl-tuner-probe: %s: getCollInfo failed\n", tuner->name);
      return 1;
    }
    int algo, proto;
    cheapest(table, &algo, &proto);
    printf("%s %zu bytes, %zu nodes, %zu ranks: model %s/%s -> chosen %s/%s channels ",
           COLLECTIVES[coll], bytes, nodes, ranks, ALGORITHMS[model_algo],
           PROTOCOLS[model_proto], ALGORITHMS[algo], PROTOCOLS[proto]);
    if (channels > 0) printf("%d\n", channels); else printf("default\n");
  }
  if (tuner->destroy(context) != 0) {
    fprintf(stderr, "rccl-tuner-probe: %s: destroy failed\n", tuner->name);
    return 1;
  }
  return 0;
}
