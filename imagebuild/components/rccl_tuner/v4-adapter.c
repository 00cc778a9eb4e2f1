/* The example tuner behind tuner interface v4 (imagebuild).
 *
 * RCCL's ext-tuner/example exports ncclTunerPlugin_v5 only (NCCL 2.28's interface); RCCL
 * 2.27 (ROCm 7.2) dlsyms ncclTunerPlugin_v4, _v3 and _v2 and so never loads it. This file
 * is compiled together with the example's plugin.c (included below, unmodified) and also
 * exports ncclTunerPlugin_v4, whose calls go to the v5 functions.
 *
 * The v4 layout: NVIDIA/nccl src/include/plugin/tuner/tuner_v4.h
 * (https://github.com/NVIDIA/nccl/blob/51c58fd6b3bd4cc50c8ec18bfd707aab45f3354a/src/include/plugin/tuner/tuner_v4.h):
 * name; init(nRanks, nNodes, logFunction, &context); getCollInfo with the same arguments
 * as v5's; destroy(context). v5 adds commId, NVLink-domain information and a constants
 * table to init: the adapter passes 0 and NULL, which the example accepts (it then leaves
 * RCCL's constants alone and reports no NVLink domain).
 *
 * Recording (IMAGEBUILD_TUNER_RECORD=DIR): every distinct request RCCL makes of the tuner
 * (collective, bytes, pipelined ops, registered buffer, communicator size) is appended to
 * DIR/tuner-<host>-<pid>.csv the first time this process sees it, so `imagebuild tune rccl
 * --records DIR` learns the sizes a config must cover without a log, in the very bytes the
 * config's ranges are compared with (NCCL's getAlgoInfo passes elementSize *
 * ncclFuncMaxSendRecvCount: the whole buffer for AllGather and ReduceScatter). A line is
 * written when first seen, not at exit, so a job killed at its time limit keeps its record.
 */
#include "plugin.c"

#include <pthread.h>
#include <unistd.h>

typedef struct {
  const char* name;
  ncclResult_t (*init)(size_t nRanks, size_t nNodes, ncclDebugLogger_t logFunction,
                       void** context);
  ncclResult_t (*getCollInfo)(void* context, ncclFunc_t collType, size_t nBytes,
                              int numPipeOps, float** collCostTable, int numAlgo, int numProto,
                              int regBuff, int* nChannels);
  ncclResult_t (*destroy)(void* context);
} imagebuildTunerV4;

/* The v5 plugin's context and what the recording needs of the communicator. */
typedef struct {
  void* inner;
  size_t nRanks;
  size_t nNodes;
} adapterContext;

#define RECORD_SLOTS 4096 /* distinct requests remembered; past that, lines may repeat */
typedef struct {
  int used, collType, numPipeOps, regBuff;
  size_t nBytes, nRanks, nNodes;
} recordSlot;

static pthread_mutex_t recordLock = PTHREAD_MUTEX_INITIALIZER;
static recordSlot recordSeen[RECORD_SLOTS];
static FILE* recordFile;
static int recordOpened;

/* ncclFunc_t (nccl_common.h): Broadcast 0, Reduce 1, AllGather 2, ReduceScatter 3,
 * AllReduce 4, SendRecv 5, Send 6, Recv 7. */
static const char* const recordNames[] = {"broadcast", "reduce", "allgather", "reducescatter",
                                          "allreduce", "sendrecv", "send", "recv"};

static FILE* recordOpen(void) { /* under recordLock */
  if (recordOpened) return recordFile;
  recordOpened = 1;
  const char* dir = getenv("IMAGEBUILD_TUNER_RECORD");
  if (dir == NULL || dir[0] == '\0') return NULL;
  char host[256] = "host";
  gethostname(host, sizeof(host));
  host[sizeof(host) - 1] = '\0';
  char path[4096];
  snprintf(path, sizeof(path), "%s/tuner-%s-%ld.csv", dir, host, (long)getpid());
  recordFile = fopen(path, "a");
  if (recordFile == NULL) {
    fprintf(stderr, "rccl-tuner: IMAGEBUILD_TUNER_RECORD: cannot write %s; not recording\n",
            path);
    return NULL;
  }
  fprintf(recordFile, "collective,bytes,num_pipe_ops,reg_buff,n_ranks,n_nodes\n");
  fflush(recordFile);
  return recordFile;
}

static void recordRequest(const adapterContext* ctx, ncclFunc_t collType, size_t nBytes,
                          int numPipeOps, int regBuff) {
  pthread_mutex_lock(&recordLock);
  FILE* file = recordOpen();
  if (file != NULL) {
    size_t hash = ((size_t)collType * 1000003u) ^ nBytes ^ ((size_t)numPipeOps << 40) ^
                  (ctx->nRanks << 20) ^ ((size_t)regBuff << 60);
    int fresh = 1;
    for (size_t probe = 0; probe < RECORD_SLOTS; probe++) {
      recordSlot* slot = &recordSeen[(hash + probe) % RECORD_SLOTS];
      if (!slot->used) {
        *slot = (recordSlot){1, (int)collType, numPipeOps, regBuff, nBytes, ctx->nRanks,
                             ctx->nNodes};
        break;
      }
      if (slot->collType == (int)collType && slot->nBytes == nBytes &&
          slot->numPipeOps == numPipeOps && slot->regBuff == regBuff &&
          slot->nRanks == ctx->nRanks && slot->nNodes == ctx->nNodes) {
        fresh = 0;
        break;
      }
    }
    if (fresh) {
      if ((int)collType >= 0 && (size_t)collType < sizeof(recordNames) / sizeof(*recordNames))
        fprintf(file, "%s", recordNames[collType]);
      else
        fprintf(file, "func%d", (int)collType);
      fprintf(file, ",%zu,%d,%d,%zu,%zu\n", nBytes, numPipeOps, regBuff, ctx->nRanks,
              ctx->nNodes);
      fflush(file);
    }
  }
  pthread_mutex_unlock(&recordLock);
}

static ncclResult_t adapterInit(size_t nRanks, size_t nNodes, ncclDebugLogger_t logFunction,
                                void** context) {
  adapterContext* ctx = calloc(1, sizeof(*ctx));
  if (ctx == NULL) return ncclInternalError;
  ctx->nRanks = nRanks;
  ctx->nNodes = nNodes;
  ncclResult_t result = ncclTunerPlugin_v5.init(&ctx->inner, 0, nRanks, nNodes, logFunction,
                                                NULL, NULL);
  if (result != ncclSuccess) {
    free(ctx);
    return result;
  }
  *context = ctx;
  return ncclSuccess;
}

static ncclResult_t adapterGetCollInfo(void* context, ncclFunc_t collType, size_t nBytes,
                                       int numPipeOps, float** collCostTable, int numAlgo,
                                       int numProto, int regBuff, int* nChannels) {
  adapterContext* ctx = context;
  recordRequest(ctx, collType, nBytes, numPipeOps, regBuff);
  return ncclTunerPlugin_v5.getCollInfo(ctx->inner, collType, nBytes, numPipeOps,
                                        collCostTable, numAlgo, numProto, regBuff, nChannels);
}

static ncclResult_t adapterDestroy(void* context) {
  adapterContext* ctx = context;
  ncclResult_t result = ncclTunerPlugin_v5.finalize(ctx->inner);
  free(ctx);
  return result;
}

/* Not const: the name is the v5 plugin's, which C does not allow in a static initializer. */
__attribute__((visibility("default"))) imagebuildTunerV4 ncclTunerPlugin_v4 = {
  .name = "",
  .init = adapterInit,
  .getCollInfo = adapterGetCollInfo,
  .destroy = adapterDestroy,
};

__attribute__((constructor)) static void adapterName(void) {
  ncclTunerPlugin_v4.name = ncclTunerPlugin_v5.name;
}
