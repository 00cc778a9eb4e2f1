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
 */
#include "plugin.c"

typedef struct {
  const char* name;
  ncclResult_t (*init)(size_t nRanks, size_t nNodes, ncclDebugLogger_t logFunction,
                       void** context);
  ncclResult_t (*getCollInfo)(void* context, ncclFunc_t collType, size_t nBytes,
                              int numPipeOps, float** collCostTable, int numAlgo, int numProto,
                              int regBuff, int* nChannels);
  ncclResult_t (*destroy)(void* context);
} imagebuildTunerV4;

static ncclResult_t adapterInit(size_t nRanks, size_t nNodes, ncclDebugLogger_t logFunction,
                                void** context) {
  return ncclTunerPlugin_v5.init(context, 0, nRanks, nNodes, logFunction, NULL, NULL);
}

static ncclResult_t adapterGetCollInfo(void* context, ncclFunc_t collType, size_t nBytes,
                                       int numPipeOps, float** collCostTable, int numAlgo,
                                       int numProto, int regBuff, int* nChannels) {
  return ncclTunerPlugin_v5.getCollInfo(context, collType, nBytes, numPipeOps, collCostTable,
                                        numAlgo, numProto, regBuff, nChannels);
}

static ncclResult_t adapterDestroy(void* context) {
  return ncclTunerPlugin_v5.finalize(context);
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
